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
    Chat {
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
    },
    /// Print llb's version and the pinned llama.cpp.
    Version,
    /// Download a GGUF from Hugging Face: sha256-verified, resumable, tool-capable (as llb_model_pull).
    Pull(llb::pull::cli::PullArgs),
    /// Write a test model: a real tokenizer, a chosen template, random weights.
    Fixture {
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
        #[arg(long)]
        out: PathBuf,
    },
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
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Version => finish(Ok(llb::version()), false),
        Cmd::Chat {
            model,
            prompt,
            tools,
            tool_choice,
            stream,
            no_parallel,
            max_tokens,
            temperature,
            seed,
            system,
            n_ctx,
            pretty,
        } => {
            let run = || -> Result<Value, Error> {
                let model = llb::pull::cli::model_path_or_pull(&model)?;
                let tools: Option<Value> = match tools {
                    Some(p) => {
                        let text = std::fs::read_to_string(&p)
                            .map_err(|e| Error::new(ErrorCode::FileNotFound, format!("{}: {e}", p.display())))?;
                        Some(
                            serde_json::from_str(&text)
                                .map_err(|e| Error::new(ErrorCode::InvalidJson, format!("{}: {e}", p.display())))?,
                        )
                    }
                    None => None,
                };
                let choice = match tool_choice.as_str() {
                    "auto" | "none" | "required" => json!(tool_choice),
                    name => json!({"type": "function", "function": {"name": name}}),
                };
                let mut messages = vec![];
                if let Some(s) = system {
                    messages.push(json!({"role": "system", "content": s}));
                }
                messages.push(json!({"role": "user", "content": prompt}));
                let mut req = json!({"messages": messages, "stream": stream});
                if let Some(t) = tools {
                    req["tools"] = t;
                    req["tool_choice"] = choice;
                    if no_parallel {
                        req["parallel_tool_calls"] = json!(false);
                    }
                }
                if let Some(m) = max_tokens {
                    req["max_tokens"] = json!(m);
                }
                if let Some(t) = temperature {
                    req["temperature"] = json!(t);
                }
                if let Some(s) = seed {
                    req["seed"] = json!(s);
                }
                let sink: llb::engine::EventSink = Box::new(|ev: &Value| {
                    if ev["type"] == "chunk" {
                        eprintln!("{}", ev["data"]);
                    }
                    true
                });
                let config = llb::request::EngineConfig {
                    model_path: model.to_string_lossy().into_owned(),
                    n_ctx: Some(n_ctx),
                    n_threads: None,
                    n_batch: None,
                    seed: None,
                    chat_template_kwargs: None,
                    ..Default::default()
                };
                let engine = llb::engine::Engine::create(config, Some(sink))?;
                engine.infer(&req.to_string())
            };
            finish(run(), pretty)
        }
        Cmd::Pull(args) => llb::pull::cli::run(&args),
        Cmd::Info { model, pretty, brief } => {
            let mut r = llb::pull::cli::model_path_or_pull(&model).and_then(|p| llb::model_info::model_info(&p));
            if let (true, Ok(Value::Object(m))) = (brief, &mut r) {
                m.remove("chat_template");
            }
            finish(r, pretty)
        }
        Cmd::Fixture {
            vocab,
            template,
            template_text,
            no_template,
            tool_use_template,
            vocab_only,
            size,
            seed,
            out,
        } => {
            let run = || -> Result<Value, Error> {
                if template.is_none() && template_text.is_none() && !no_template {
                    return Err(Error::new(
                        ErrorCode::InvalidArgument,
                        "choose a template: --template FILE|NAME, --template-text STR or --no-template",
                    ));
                }
                let mut opts = FixtureOptions::new(&vocab);
                opts.template = match (template, template_text) {
                    (Some(t), _) => Some(fixture::read_template(&t)?),
                    (None, Some(text)) => Some(text),
                    _ => None,
                };
                opts.tool_use_template = tool_use_template.as_deref().map(fixture::read_template).transpose()?;
                opts.vocab_only = vocab_only;
                opts.size = size.parse::<Size>()?;
                opts.seed = seed;
                let bytes = fixture::write_fixture(&opts, &out)?;
                Ok(serde_json::json!({"type": "fixture", "path": out, "tensor_bytes": bytes}))
            };
            finish(run(), false)
        }
    }
}
