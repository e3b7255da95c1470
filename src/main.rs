//! The `llb` command line: a thin front over the library (no logic of its own).

use clap::{Parser, Subcommand};
use llb::error::{Error, ErrorCode};
use llb::fixture::{self, FixtureOptions, Size};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "llb", version, about = "Tool-calling bridge over llama.cpp")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print what a GGUF's chat template can do (reads the header only).
    Info {
        /// A GGUF file, or a Hugging Face repo id (`org/name[:QUANT]`) to pull first.
        model: String,
        /// Pretty-print the JSON.
        #[arg(long)]
        pretty: bool,
        /// Leave out the (long) chat_template text.
        #[arg(long)]
        brief: bool,
    },
    /// Run one tool-calling chat completion and print it.
    Chat(ChatArgs),
    /// Print llb's version and the pinned llama.cpp.
    Version,
    /// Download a GGUF from Hugging Face: sha256-verified, resumable, tool-capable (as llb_model_pull).
    Pull(llb::pull::cli::PullArgs),
    /// Write a test model: a real tokenizer, a chosen template, random weights.
    Fixture(FixtureArgs),
}

#[derive(clap::Args)]
struct ChatArgs {
    /// A GGUF file, or a Hugging Face repo id (`org/name[:QUANT]`) to pull first.
    model: String,
    /// The user's message.
    prompt: String,
    /// A JSON file with the OpenAI `tools` array.
    #[arg(long)]
    tools: Option<PathBuf>,
    /// auto | none | required | a tool's name.
    #[arg(long, default_value = "auto")]
    tool_choice: String,
    /// Print the deltas as they come (chat.completion.chunk JSON lines on stderr).
    #[arg(long)]
    stream: bool,
    /// At most one tool call (`parallel_tool_calls: false`).
    #[arg(long)]
    no_parallel: bool,
    #[arg(long)]
    max_tokens: Option<u32>,
    #[arg(long)]
    temperature: Option<f32>,
    #[arg(long)]
    seed: Option<u64>,
    /// A system message.
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 4096)]
    n_ctx: u32,
    /// Pretty-print the final completion.
    #[arg(long)]
    pretty: bool,
}

#[derive(clap::Args)]
struct FixtureArgs {
    /// Vocabulary name (models/ggml-vocab-NAME.gguf of the pinned tree) or a GGUF path.
    #[arg(long)]
    vocab: String,
    /// Chat template: a file, or a corpus template name (models/templates/NAME.jinja).
    #[arg(long, group = "tmpl")]
    template: Option<String>,
    /// Chat template given inline.
    #[arg(long, group = "tmpl")]
    template_text: Option<String>,
    /// Write no chat template at all.
    #[arg(long, group = "tmpl")]
    no_template: bool,
    /// The `tool_use` template variant (a file or a corpus name).
    #[arg(long)]
    tool_use_template: Option<String>,
    /// Header and tokenizer only, no tensors.
    #[arg(long)]
    vocab_only: bool,
    /// `tiny` (a few MB) or `<N>g` (at least N GB of weights, for benchmarks).
    #[arg(long, default_value = "tiny")]
    size: String,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The context the model says it was trained for (`llama.context_length`: n_ctx's ceiling)
    #[arg(long, default_value_t = 8192)]
    context_length: u32,
    #[arg(long)]
    out: PathBuf,
}

fn print_json(v: &Value, pretty: bool) {
    if pretty {
        println!("{}", serde_json::to_string_pretty(v).unwrap());
    } else {
        println!("{v}");
    }
}

/// Prints the result (or the error JSON) and maps errors to a non-zero exit.
fn finish(r: Result<Value, Error>, pretty: bool) -> ExitCode {
    match r {
        Ok(v) => {
            print_json(&v, pretty);
            ExitCode::SUCCESS
        }
        Err(e) => {
            print_json(&e.to_json(), pretty);
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Version => finish(Ok(llb::version()), false),
        Cmd::Chat(a) => {
            let pretty = a.pretty;
            finish(chat(a), pretty)
        }
        Cmd::Pull(args) => llb::pull::cli::run(&args),
        Cmd::Info { model, pretty, brief } => {
            let mut r = llb::pull::cli::model_path_or_pull(&model).and_then(|p| llb::model_info::model_info(&p));
            if let (true, Ok(Value::Object(m))) = (brief, &mut r) {
                m.remove("chat_template");
            }
            finish(r, pretty)
        }
        Cmd::Fixture(a) => finish(fixture(a), false),
    }
}

/// `llb chat`: one completion on an engine for the model (pulled first when it is a repo id);
/// streamed chunks go to stderr as they come.
fn chat(a: ChatArgs) -> Result<Value, Error> {
    let model = llb::pull::cli::model_path_or_pull(&a.model)?;
    let tools: Option<Value> = match &a.tools {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| Error::new(ErrorCode::FileNotFound, format!("{}: {e}", p.display())))?;
            Some(
                serde_json::from_str(&text)
                    .map_err(|e| Error::new(ErrorCode::InvalidJson, format!("{}: {e}", p.display())))?,
            )
        }
        None => None,
    };
    let req = chat_request(&a, tools);
    let sink: llb::engine::EventSink = Box::new(|ev: &Value| {
        if ev["type"] == "chunk" {
            eprintln!("{}", ev["data"]);
        }
        true
    });
    let config = llb::request::EngineConfig {
        model_path: model.to_string_lossy().into_owned(),
        n_ctx: Some(a.n_ctx),
        ..Default::default()
    };
    let engine = llb::engine::Engine::create(config, Some(sink))?;
    engine.infer(&req.to_string())
}

/// The OpenAI request `llb chat`'s arguments describe.
fn chat_request(a: &ChatArgs, tools: Option<Value>) -> Value {
    let mut messages = vec![];
    if let Some(s) = &a.system {
        messages.push(json!({"role": "system", "content": s}));
    }
    messages.push(json!({"role": "user", "content": a.prompt}));
    let mut req = json!({"messages": messages, "stream": a.stream});
    if let Some(t) = tools {
        req["tools"] = t;
        req["tool_choice"] = match a.tool_choice.as_str() {
            "auto" | "none" | "required" => json!(a.tool_choice),
            name => json!({"type": "function", "function": {"name": name}}),
        };
        if a.no_parallel {
            req["parallel_tool_calls"] = json!(false);
        }
    }
    if let Some(m) = a.max_tokens {
        req["max_tokens"] = json!(m);
    }
    if let Some(t) = a.temperature {
        req["temperature"] = json!(t);
    }
    if let Some(s) = a.seed {
        req["seed"] = json!(s);
    }
    req
}

/// `llb fixture`: writes the test model and says where.
fn fixture(a: FixtureArgs) -> Result<Value, Error> {
    if a.template.is_none() && a.template_text.is_none() && !a.no_template {
        return Err(Error::new(
            ErrorCode::InvalidArgument,
            "choose a template: --template FILE|NAME, --template-text STR or --no-template",
        ));
    }
    let mut opts = FixtureOptions::new(&a.vocab);
    opts.template = match (a.template, a.template_text) {
        (Some(t), _) => Some(fixture::read_template(&t)?),
        (None, Some(text)) => Some(text),
        _ => None,
    };
    opts.tool_use_template = a.tool_use_template.as_deref().map(fixture::read_template).transpose()?;
    opts.vocab_only = a.vocab_only;
    opts.size = a.size.parse::<Size>()?;
    opts.seed = a.seed;
    opts.context_length = a.context_length;
    let bytes = fixture::write_fixture(&opts, &a.out)?;
    Ok(serde_json::json!({"type": "fixture", "path": a.out, "tensor_bytes": bytes}))
}
