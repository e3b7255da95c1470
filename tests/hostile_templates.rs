//! Hostile chat templates (issue #6): a GGUF's template is code from whoever made the file. At
//! the pin, llama.cpp's Jinja engine has no step, depth or memory budget, so llb runs the caps
//! probe in a bounded child process (native/isolate.cpp). Each template here would crash, hang or
//! exhaust the memory of an in-process probe; llb_model_info and llb_chat_create must answer
//! `template_error` within bounded time, with the host's memory untouched, and keep working.

mod common;

use common::cabi::{take, CEngine};
use common::fixture_with;
use llb::fixture::FixtureOptions;
use serde_json::{json, Value};
use std::ffi::CString;
use std::time::{Duration, Instant};

/// The probe's deadline in this test binary (the default is 10 s).
const TIMEOUT_MS: u64 = 3000;

/// Sets the probe deadline before any llb call, and runs the tests of this binary one at a time
/// (the peak-RSS check must not see another test's model).
fn setup() -> std::sync::MutexGuard<'static, ()> {
    static ONCE: std::sync::Once = std::sync::Once::new();
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONCE.call_once(|| std::env::set_var("LLB_PROBE_TIMEOUT_MS", TIMEOUT_MS.to_string()));
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const MESSAGES: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";

/// (name, template, what an in-process probe does with it)
fn hostile() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "self_recursive_macro",
            format!("{{% macro f(x) %}}{{{{ f(x) }}}}{{% endmacro %}}{{{{ f(1) }}}}{MESSAGES}"),
            "stack overflow (SIGSEGV)",
        ),
        (
            "range_1e9",
            format!("{{% for i in range(1000000000) %}}{{% endfor %}}{MESSAGES}"),
            "builds 10^9 values: memory without bound",
        ),
        (
            "nested_loops_1e10",
            format!(
                "{{% set ns = namespace(n=0) %}}{{% for i in range(100000) %}}{{% for j in range(100000) %}}\
                 {{% set ns.n = ns.n + 1 %}}{{% endfor %}}{{% endfor %}}{MESSAGES}"
            ),
            "10^10 iterations in little memory: hangs",
        ),
        (
            "string_doubling",
            format!(
                "{{% set ns = namespace(s='x') %}}{{% for i in range(64) %}}{{% set ns.s = ns.s ~ ns.s %}}{{% endfor %}}\
                 {{{{ ns.s }}}}{MESSAGES}"
            ),
            "a 2^64-byte string: memory without bound",
        ),
        ("string_repetition", format!("{{{{ 'x' * 1000000000 }}}}{MESSAGES}"), "a 1 GB string in one operation"),
        (
            "deeply_nested_expression",
            format!("{{{{ {}1{} }}}}{MESSAGES}", "(".repeat(200_000), ")".repeat(200_000)),
            "parser recursion: stack overflow",
        ),
        (
            "hangs_on_tool_results",
            "{% for m in messages %}{% if m.role == 'tool' %}{% for i in range(100000) %}{% for j in range(100000) %}\
             {% endfor %}{% endfor %}{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
             {% if tools %}{{ tools | tojson }}{% endif %}\
             {% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}{% endfor %}"
                .to_string(),
            "hangs only once a conversation holds a tool result",
        ),
        ("raise_exception", format!("{{{{ raise_exception('no probing, please') }}}}{MESSAGES}"), "raises"),
        ("unclosed_block", format!("{{% for m in messages %}}{{{{ m.content }}}}{MESSAGES}"), "syntax error"),
        ("unclosed_expression", format!("{{{{ messages[0].content {MESSAGES}"), "syntax error"),
        ("unknown_tag", format!("{{% frobnicate %}}{MESSAGES}"), "syntax error"),
    ]
}

fn model_info(path: &std::path::Path) -> Value {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: valid C string; the result is freed by take.
    take(unsafe { llb::ffi::llb_model_info(c.as_ptr()) })
}

fn vm_hwm_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn hostile_templates_are_template_errors_within_bounds() {
    let _serial = setup();
    let hwm_before = vm_hwm_kb();
    let bound = Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(5);
    let mut table = Vec::new();
    for (name, template, what) in hostile() {
        let mut o = FixtureOptions::new("qwen2");
        o.template = Some(template);
        o.vocab_only = true; // the gate runs on the header, before any weight is loaded
        let path = fixture_with(&format!("hostile-{name}"), &o);

        let t0 = Instant::now();
        let info = model_info(&path);
        let t_info = t0.elapsed();
        assert_eq!(info["type"], "error", "{name}: {info}");
        assert_eq!(info["code"], "template_error", "{name}: {info}");
        assert!(t_info < bound, "{name}: model_info took {t_info:?}");

        let t0 = Instant::now();
        let created = CEngine::open(&json!({"model_path": path, "n_threads": 1}));
        let t_create = t0.elapsed();
        let failure = created.err().unwrap_or_else(|| panic!("{name}: llb_chat_create accepted a hostile template"));
        assert_eq!(failure["type"], "create_failure", "{name}: {failure}");
        assert_eq!(failure["code"], "template_error", "{name}: {failure}");
        assert!(t_create < bound, "{name}: create took {t_create:?}");
        let msg = info["message"].as_str().unwrap().lines().next().unwrap_or("").to_string();
        table.push(format!("{name:<26} {what:<52} {:>6} ms  {msg}", t_info.as_millis()));
    }
    println!("hostile templates (model_info → template_error; probe deadline {TIMEOUT_MS} ms):");
    for row in &table {
        println!("  {row}");
    }
    // The blow-ups happened in the child (up to its 1024 MiB budget, unbounded in-process): the
    // host's own peak memory did not follow them (fixtures and JSON only).
    let grown_mb = (vm_hwm_kb().saturating_sub(hwm_before)) / 1024;
    println!("host peak RSS growth over all hostile probes: {grown_mb} MB");
    assert!(grown_mb < 64, "the host's peak RSS grew by {grown_mb} MB");
}

#[test]
fn the_host_keeps_working_after_hostile_probes() {
    let _serial = setup();
    // Crash and hang a few probes, then do real work in the same process.
    for (name, template, _) in hostile().into_iter().take(3) {
        let mut o = FixtureOptions::new("qwen2");
        o.template = Some(template);
        o.vocab_only = true;
        let info = model_info(&fixture_with(&format!("hostile-again-{name}"), &o));
        assert_eq!(info["code"], "template_error", "{name}: {info}");
    }
    let good = common::corpus_fixture("Qwen-Qwen2.5-7B-Instruct", false);
    let info = model_info(&good);
    assert_eq!(info["type"], "model_info", "{info}");
    assert_eq!(info["supports_tools"], true, "{info}");
    let engine = CEngine::open_model(&good);
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}}]);
    let resp = engine.infer(&json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": tools, "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 200, "seed": 1}));
    assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls", "{resp}");
    assert_eq!(resp["object"], "chat.completion", "{resp}");
    let call = &resp["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{resp}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{resp}");
}

#[test]
fn syntax_errors_name_the_problem() {
    let _serial = setup();
    let mut o = FixtureOptions::new("qwen2");
    o.template = Some("{% for m in messages %}{{ m.content }{% endfor %}".to_string());
    o.vocab_only = true;
    let info = model_info(&fixture_with("hostile-syntax-message", &o));
    assert_eq!(info["code"], "template_error", "{info}");
    let msg = info["message"].as_str().unwrap();
    // The parser's own words and position, not a bare "std::exception".
    assert!(msg.contains("Expected }}") && msg.contains("m.content"), "{msg}");
}
