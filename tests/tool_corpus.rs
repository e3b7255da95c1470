//! Real tool schemas (tests/data/tool-corpus.json: MCP servers' tool lists, gathered by
//! scripts/gather-tool-corpus.mjs) × six template families × `tool_choice` required and named,
//! on tiny random-weight fixtures: every request yields one call whose arguments validate against
//! the tool's schema, or a clear `invalid_argument` naming the tool. The one exception, counted
//! and printed apart: in the raw-text XML format a string `pattern` and unions with a string are
//! free text, and Gemma 4's dicts do not enforce `pattern` (docs/tool-calls.md lists them as not
//! enforced there).
//!
//! Random weights never close a free string nor end a free list, so every string without a
//! length, enum, const or format gets `maxLength`, every array `maxItems` and every object
//! `additionalProperties: false` (which the grammar must then honour too). CI runs a fixed sample (`LLB_TOOL_CORPUS_STRIDE`, default every 40th, a different one per family
//! tool); `scripts/tool-corpus.sh` runs all of them and prints the figures in docs/tool-calls.md.

mod common;

use common::cabi::CEngine;
use common::*;
use serde_json::{json, Value};
use std::time::Instant;

/// Every tool of the corpus as an OpenAI tool, in file order.
fn corpus() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tool-corpus.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap().clone())
        .map(|t| {
            let mut params = t["parameters"].clone();
            bound_for_random_weights(&mut params);
            json!({"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": params}})
        })
        .collect()
}

/// Adds `maxLength` to free strings and `maxItems` to arrays, and closes objects, in every schema
/// position of a schema (not in property maps: a property may be named `properties`).
fn bound_for_random_weights(s: &mut Value) {
    let Value::Object(o) = s else { return };
    let ty: Vec<String> = match o.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect(),
        _ => vec![],
    };
    // The formats the grammars enforce have their own length; others (`json`, `int32`) do not.
    let enforced_format =
        o.get("format").and_then(Value::as_str).is_some_and(|f| ["date", "time", "date-time", "uuid"].contains(&f));
    // A `pattern` is its own bound (llama.cpp's grammar takes it over any length, and llb bounds
    // its repetitions to 64).
    let free = !o.contains_key("enum") && !o.contains_key("const") && !o.contains_key("pattern") && !enforced_format;
    if ty.iter().any(|t| t == "string") && free && !o.contains_key("maxLength") {
        let min = o.get("minLength").and_then(Value::as_u64).unwrap_or(0);
        o.insert("maxLength".into(), json!(min.max(8)));
    }
    if ty.iter().any(|t| t == "array") && !o.contains_key("maxItems") {
        let min = o.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        o.insert("maxItems".into(), json!(min.max(2)));
    }
    // Extra keys of an object are free strings of keys and values: the object's analogue of
    // maxLength is admitting none beyond its properties.
    if ty.iter().any(|t| t == "object") || o.contains_key("properties") {
        o.entry("properties").or_insert(json!({}));
        o.insert("additionalProperties".into(), json!(false));
    }
    for (k, v) in o.iter_mut() {
        match k.as_str() {
            "properties" | "$defs" | "definitions" => {
                if let Some(m) = v.as_object_mut() {
                    m.values_mut().for_each(bound_for_random_weights);
                }
            }
            "items" | "additionalProperties" | "not" => bound_for_random_weights(v),
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Some(a) = v.as_array_mut() {
                    a.iter_mut().for_each(bound_for_random_weights);
                }
            }
            _ => {}
        }
    }
}

#[derive(Default)]
struct Tally {
    pass: usize,
    invalid_argument: usize,
    /// Calls that break a keyword docs/tool-calls.md lists as not enforced in this format.
    gap: Vec<String>,
    fail: Vec<String>,
}

const RAW_TEXT: &str = "xml raw-text (Qwen3-Coder)";
const GEMMA4: &str = "gemma 4";

/// Gemma 4's dicts do not enforce `pattern` (docs/tool-calls.md).
fn pattern_gap(schema: &Value) -> Option<String> {
    schema.to_string().contains("\"pattern\":").then(|| "`pattern` in a Gemma 4 dict".to_string())
}

/// Why a raw-text format cannot enforce an argument of this tool (docs/tool-calls.md): a string
/// `pattern`, or a union or anyOf with a string alternative (the value is then free text).
fn raw_text_gap(tool: &Value) -> Option<String> {
    let props = tool["function"]["parameters"]["properties"].as_object()?;
    props.iter().find_map(|(k, s)| {
        let is_string =
            |s: &Value| s["type"] == "string" || s["type"].as_array().is_some_and(|a| a.contains(&json!("string")));
        let union = s["type"].as_array().is_some_and(|a| a.len() > 1 && a.contains(&json!("string")))
            || ["anyOf", "oneOf"].iter().any(|u| s[*u].as_array().is_some_and(|a| a.iter().any(is_string)));
        if s.get("pattern").is_some() {
            Some(format!("`pattern` on raw-text argument `{k}`"))
        } else if union {
            Some(format!("raw-text argument `{k}` is a union with a string"))
        } else {
            None
        }
    })
}

fn judge(tool: &Value, r: &Value, want: &str) -> Result<bool, String> {
    if r["type"] == "error" {
        let msg = r["message"].as_str().unwrap_or("");
        return if r["code"] == "invalid_argument" && msg.contains(want) {
            Ok(false)
        } else {
            Err(format!("error {r}"))
        };
    }
    let c = &r["choices"][0];
    let calls = c["message"]["tool_calls"].as_array().cloned().unwrap_or_default();
    if calls.len() != 1 || c["finish_reason"] != "tool_calls" {
        return Err(format!(
            "{} calls, finish {}, warnings {}, content {:.300}",
            calls.len(),
            c["finish_reason"],
            r["warnings"],
            c["message"]["content"].to_string()
        ));
    }
    let f = &calls[0]["function"];
    if f["name"] != want {
        return Err(format!("called {}", f["name"]));
    }
    let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap_or(""))
        .map_err(|e| format!("arguments are not JSON ({e}): {}", f["arguments"]))?;
    let schema = &tool["function"]["parameters"];
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("the test's validator cannot compile the schema: {e}"))?;
    let errors: Vec<String> = validator.iter_errors(&args).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    if errors.is_empty() {
        Ok(true)
    } else {
        Err(format!("{args} does not validate: {}", errors.join("; ")))
    }
}

// Over 60 lines: one pass over the corpus with its tally and report.
#[test]
fn real_tool_schemas_yield_valid_calls_in_every_family() {
    let tools = corpus();
    assert!(tools.len() >= 300, "the corpus holds {} tools", tools.len());
    let stride: usize = std::env::var("LLB_TOOL_CORPUS_STRIDE").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let stride = stride.max(1);
    // One tool by name, for debugging with LLB_DEBUG=1.
    let only = std::env::var("LLB_TOOL_CORPUS_ONLY").ok();
    let sample: Vec<usize> = (0..tools.len()).step_by(stride).collect();
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (fi, (family, template)) in FAMILIES.into_iter().enumerate() {
        let started = Instant::now();
        // Room for three of the corpus's longest tool descriptions (the fixtures' training context).
        let engine =
            CEngine::open(&json!({"model_path": corpus_fixture(template, false), "n_ctx": 8192, "n_threads": 1}))
                .unwrap_or_else(|e| panic!("create failed: {e}"));
        let mut tally = Tally::default();
        // Each family its own sample: the six together cover six times as many tools.
        for i in sample.iter().map(|i| (i + fi * stride / FAMILIES.len()) % tools.len()) {
            let tool = &tools[i];
            if only.as_ref().is_some_and(|o| tool["function"]["name"] != *o) {
                continue;
            }
            let i = i as u64;
            let name = tool["function"]["name"].as_str().unwrap();
            // Named: the tool among two others of the corpus; required: the tool alone.
            let others = [&tools[(i as usize + 1) % tools.len()], &tools[(i as usize + 7) % tools.len()]];
            for (label, list, choice) in [
                ("required", json!([tool]), json!("required")),
                ("named", json!([others[0], tool, others[1]]), json!({"type": "function", "function": {"name": name}})),
            ] {
                let req = json!({
                    "messages": [{"role": "user", "content": format!("Use {name}.")}],
                    "tools": list, "tool_choice": choice, "parallel_tool_calls": false,
                    "max_tokens": 768, "seed": 7 + i,
                    "chat_template_kwargs": {"enable_thinking": false},
                });
                match judge(tool, &engine.infer(&req), name) {
                    Ok(true) => tally.pass += 1,
                    Ok(false) => tally.invalid_argument += 1,
                    Err(e) => {
                        let line = format!("{family} [{label}] {name}: {e}");
                        let gap = match family {
                            RAW_TEXT => raw_text_gap(tool),
                            GEMMA4 => pattern_gap(&tool["function"]["parameters"]),
                            _ => None,
                        };
                        match gap {
                            Some(why) => {
                                eprintln!("GAP  {line:.400} ({why}: not enforced in this format)");
                                tally.gap.push(line);
                            }
                            None => {
                                eprintln!("FAIL {line:.600}");
                                tally.fail.push(line);
                            }
                        }
                    }
                }
            }
        }
        let n = 2 * sample.len();
        let line = format!(
            "{family:28} {:3}/{n} valid calls, {} invalid_argument, {} documented gaps, {} failed ({:.1} s)",
            tally.pass,
            tally.invalid_argument,
            tally.gap.len(),
            tally.fail.len(),
            started.elapsed().as_secs_f64()
        );
        eprintln!("{line}");
        report.push(line);
        failures.extend(tally.fail);
    }
    eprintln!("{} tools of {} sampled (stride {stride})\n{}", sample.len(), tools.len(), report.join("\n"));
    assert!(failures.is_empty(), "{} requests failed:\n{}", failures.len(), failures.join("\n"));
}

/// llama.cpp's grammar takes F8–FF as a character's lead byte and overlong forms and surrogates
/// as characters (src/utf8.rs). With the raw byte tokens pushed up, the model writes byte
/// sequences: the strings must still be UTF-8 (no U+FFFD in the arguments) within `maxLength`.
#[test]
fn strings_stay_utf8_within_max_length_when_raw_bytes_are_favoured() {
    let tool = json!({"type": "function", "function": {"name": "tag", "description": "Tag a page",
        "parameters": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2}},
        "required": ["tags"], "additionalProperties": false}}});
    let mut failures = Vec::new();
    for (family, template) in FAMILIES {
        let path = corpus_fixture(template, false);
        let bias: serde_json::Map<String, Value> = tokens_where(&path, |p| matches!(p, [b] if *b >= 0x80))
            .into_iter()
            .map(|t| (t.to_string(), json!(8)))
            .collect();
        assert!(bias.len() >= 64, "{family}: {} raw byte tokens", bias.len());
        let engine = CEngine::open_model(&path);
        for seed in 0..3u64 {
            let r = engine.infer(&json!({
                "messages": [{"role": "user", "content": "Tag it."}], "tools": [tool],
                "tool_choice": {"type": "function", "function": {"name": "tag"}}, "parallel_tool_calls": false, "max_tokens": 300,
                "seed": seed, "temperature": 1.0, "logit_bias": bias, "chat_template_kwargs": {"enable_thinking": false},
            }));
            if let Err(e) = judge(&tool, &r, "tag") {
                failures.push(format!("{family} seed {seed}: {e}"));
                continue;
            }
            let args = r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap();
            if args.contains('\u{FFFD}') {
                failures.push(format!("{family} seed {seed}: invalid UTF-8 in {args}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The failures: numbers the grammar admitted but no double holds (`-1E1657`) or no
/// consumer holds exactly (16+ integer digits), and bounds on numbers that no format enforced.
#[test]
fn numbers_are_parseable_and_inside_their_bounds_in_every_family() {
    let tool = json!({"type": "function", "function": {"name": "draw", "description": "Draw a circle",
        "parameters": {"type": "object", "properties": {
            "radius": {"type": "number"},
            "count": {"type": "integer"},
            "opacity": {"type": "number", "minimum": 0, "maximum": 1},
            "offset": {"type": "number", "exclusiveMinimum": -10, "exclusiveMaximum": 10},
            "layer": {"type": "integer", "minimum": 1},
            "angle": {"type": ["integer", "null"], "minimum": -180, "maximum": 180}},
            "required": ["radius", "count", "opacity", "offset", "layer", "angle"],
            "additionalProperties": false}}});
    let mut failures = Vec::new();
    for (family, template) in FAMILIES {
        let engine = CEngine::open_model(&corpus_fixture(template, false));
        for seed in 0..4u64 {
            let choice = if seed % 2 == 0 {
                json!("required")
            } else {
                json!({"type": "function", "function": {"name": "draw"}})
            };
            let r = engine.infer(&json!({
                "messages": [{"role": "user", "content": "Draw a circle."}],
                "tools": [tool], "tool_choice": choice, "parallel_tool_calls": false, "max_tokens": 400, "seed": seed, "temperature": 1.5,
                "chat_template_kwargs": {"enable_thinking": false},
            }));
            if let Err(e) = judge(&tool, &r, "draw") {
                failures.push(format!("{family} seed {seed}: {e}"));
                continue;
            }
            let args: Value = serde_json::from_str(
                r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap(),
            )
            .unwrap();
            for k in ["count", "layer"] {
                let n = args[k].as_i64().map(i64::unsigned_abs).unwrap_or(u64::MAX);
                if n > 999_999_999_999_999 {
                    failures.push(format!("{family} seed {seed}: {k} = {} is past 15 digits", args[k]));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A schema llb cannot compile is a request error naming the tool and the keyword, in every
/// family, never a call that fails to parse.
#[test]
fn an_uncompilable_schema_is_invalid_argument_naming_tool_and_keyword() {
    let bad = [
        (json!({"n": {"type": "integer", "minimum": 5, "maximum": 4}}), "minimum/maximum"),
        (json!({"n": false}), "boolean schema"),
        (json!({"n": {"type": "double"}}), "`type: \"double\"`"),
    ];
    for (family, template) in FAMILIES {
        let engine = CEngine::open_model(&corpus_fixture(template, false));
        for (props, keyword) in &bad {
            let tool = json!({"type": "function", "function": {"name": "pick", "parameters": {"type": "object",
                "properties": props, "required": ["n"]}}});
            let r = engine.infer(&json!({"messages": [{"role": "user", "content": "Pick."}], "tools": [tool],
                "tool_choice": "required", "max_tokens": 64, "chat_template_kwargs": {"enable_thinking": false}}));
            assert_eq!(r["code"], "invalid_argument", "{family}: {r}");
            let msg = r["message"].as_str().unwrap();
            assert!(msg.contains("`pick`") && msg.contains(keyword), "{family}: {msg}");
        }
    }
}

/// 300 distinct real tools of the corpus: over 200 KB of schema JSON.
fn three_hundred_tools() -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    let tools: Vec<Value> =
        corpus().into_iter().filter(|t| seen.insert(t["function"]["name"].to_string())).take(300).collect();
    let kb = serde_json::to_string(&tools).unwrap().len() / 1024;
    assert!(tools.len() == 300 && kb >= 200, "{} tools, {kb} KB", tools.len());
    tools
}

/// Checks one call against the schema of the tool it names; a documented gap of the family is
/// printed, not failed.
fn check_call(family: &str, tools: &[Value], r: &Value) {
    let name = r["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("{family}: no call: {r:.600}"));
    let tool = tools.iter().find(|t| t["function"]["name"] == name).unwrap_or_else(|| panic!("{family}: unknown {name}"));
    let gap = match family {
        RAW_TEXT => raw_text_gap(tool),
        GEMMA4 => pattern_gap(&tool["function"]["parameters"]),
        _ => None,
    };
    match judge(tool, r, name) {
        Ok(true) => {}
        Err(e) if gap.is_some() => eprintln!("GAP {family} {name}: {e:.300} ({})", gap.unwrap()),
        other => panic!("{family}: {name}: {other:?}"),
    }
}

/// 300 tools (over 200 KB of schema JSON) in one `required` request, in every family: the grammar
/// over all of them builds on the engine (llama-server's fails past ~100 KB), and a walk through
/// it that picks uniformly among the allowed tokens (a model that disagrees with the grammar at
/// every step; the end as soon as it is allowed) is one call that the family's parser reads and
/// that validates against the chosen tool's schema. Without a model: the 110k-token prompt would
/// take minutes per family on a CPU (the test below does that, outside CI).
#[test]
fn three_hundred_tools_walk_to_a_valid_strict_call_in_every_family() {
    let tools = three_hundred_tools();
    for (fi, (family, template)) in FAMILIES.into_iter().enumerate() {
        let config: llb::request::EngineConfig =
            serde_json::from_value(json!({"model_path": corpus_fixture(template, false), "n_ctx": 512, "n_threads": 1}))
                .unwrap();
        let e = llb::engine::Engine::create(config, None).unwrap();
        let (p, vocab) = (e.prompter(), e.vocab());
        let req = e
            .resolve(
                &json!({
                    "messages": [{"role": "user", "content": "Use one of the tools."}], "tools": tools,
                    "tool_choice": "required", "parallel_tool_calls": false, "chat_template_kwargs": {"enable_thinking": false},
                })
                .to_string(),
            )
            .unwrap();
        let started = Instant::now();
        let (rendered, _) = p.plan(&req, None).unwrap_or_else(|e| panic!("{family}: {e:?}"));
        let plan = p.finish(rendered, &req).unwrap_or_else(|e| panic!("{family}: {e:?}"));
        let mut g = p.grammar(plan.grammar.as_ref().expect("a strict grammar")).unwrap();
        let built = started.elapsed();
        assert!(matches!(g, llb::grammar::Grammar::Engine(_)), "{family}: the grammar fell back to GBNF");
        for t in plan.grammar_prefill.as_deref().map(|pre| vocab.spell(pre).unwrap()).unwrap_or_default() {
            g.prefill(t, &vocab.piece(t, true)).unwrap();
        }
        let n_vocab = vocab.n_tokens() as usize;
        let logits = vec![0.0f32; n_vocab];
        let mut rng = 0x9e3779b97f4a7c15u64 ^ fi as u64;
        let mut text = Vec::new();
        for step in 0.. {
            assert!(step < 4000, "{family}: no end after 4000 tokens: {}", String::from_utf8_lossy(&text));
            let allowed = g.allowed_candidates(&logits).unwrap().expect("the engine lists candidates");
            let eog = allowed.iter().find(|t| vocab.is_eog(t.id));
            if let Some(_end) = eog {
                break;
            }
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let t = allowed[(rng >> 33) as usize % allowed.len()].id;
            let piece = vocab.piece(t, true);
            assert!(g.accept(t, &piece).unwrap().is_none(), "{family}: token refused after the mask allowed it");
            text.extend_from_slice(&piece);
        }
        let text = String::from_utf8(text).unwrap_or_else(|e| panic!("{family}: not UTF-8: {e}"));
        let msg = plan.parser.parse(&text, false).unwrap_or_else(|e| panic!("{family}: {e:?}: {text:.600}"));
        assert_eq!(msg.tool_calls.len(), 1, "{family}: {text:.600}");
        let c = &msg.tool_calls[0];
        let r = json!({"choices": [{"finish_reason": "tool_calls",
            "message": {"tool_calls": [{"function": {"name": c.name, "arguments": c.arguments}}]}}]});
        check_call(family, &tools, &r);
        eprintln!("{family}: {} valid; grammar built in {:.0} ms, {} bytes", c.name, built.as_secs_f64() * 1e3, text.len());
    }
}

/// The same 300 tools through a real request (prompt of ~110k tokens on the fixture, minutes per
/// family on a CPU): `scripts/tool-corpus.sh` runs it; CI runs the walk above.
#[test]
#[ignore]
fn three_hundred_tools_yield_a_valid_strict_call_in_every_family() {
    let tools = three_hundred_tools();
    for (family, template) in FAMILIES {
        let started = Instant::now();
        let mut o = llb::fixture::FixtureOptions::new(vocab_for(template));
        o.template = Some(llb::fixture::read_template(template).unwrap());
        o.context_length = 262144;
        let path = fixture_with(&format!("{template}-tiny-256k"), &o);
        let engine = CEngine::open(&json!({"model_path": path, "n_ctx": 262144, "n_threads": 2}))
            .unwrap_or_else(|e| panic!("create failed: {e}"));
        let req = json!({
            "messages": [{"role": "user", "content": "Use one of the tools."}],
            "tools": tools, "tool_choice": "required", "parallel_tool_calls": false,
            "max_tokens": 768, "seed": 11, "chat_template_kwargs": {"enable_thinking": false},
        });
        let r = engine.infer(&req);
        check_call(family, &tools, &r);
        eprintln!("{family}: valid; prompt {} tokens, {:.1} s", r["usage"]["prompt_tokens"], started.elapsed().as_secs_f64());
    }
}
