//! llama-server from the pinned tree as a benchmark peer (scripts/llama-server.sh builds it): a
//! child process on a free loopback port, killed on drop, and plain HTTP/1.1 to it. Included by
//! the benchmarks that compare against it (`#[path = "peer/llama_server.rs"] mod llama_server;`).
#![allow(dead_code)] // each benchmark uses its part

use serde_json::Value;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct LlamaServer {
    child: Child,
    port: u16,
}

impl LlamaServer {
    /// Starts `bin` with `args` (model, context, threads, ...) plus `--port`, and waits until
    /// `/health` says ok.
    pub fn start(bin: &str, args: &[String]) -> LlamaServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(bin)
            .args(args)
            .args(["--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = LlamaServer { child, port };
        for _ in 0..600 {
            if s.call("GET", "/health", "").is_some_and(|b| b.contains("ok")) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("llama-server did not start");
    }

    /// One request; the response's body, or None when the connection failed.
    pub fn call(&self, method: &str, path: &str, body: &str) -> Option<String> {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        c.write_all(head.as_bytes()).ok()?;
        c.write_all(body.as_bytes()).ok()?;
        let mut out = String::new();
        c.read_to_string(&mut out).ok()?;
        out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
    }

    /// A chat completion (not streamed), parsed.
    pub fn chat(&self, req: &Value) -> Value {
        let out = self.call("POST", "/v1/chat/completions", &req.to_string()).expect("llama-server answered nothing");
        serde_json::from_str(&out).expect("llama-server's answer is JSON")
    }

    /// The port, for requests this module does not make (streams read as they come).
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
