//! The Hugging Face listing parser and file planner of `llb_model_pull`
//! (`llb::pull::plan_from_listing`: JSON → checks → choice of GGUF → sizes and checksums) on
//! arbitrary text, with no quant, two quants and an explicit file name taken from the input.
//! Only UTF-8 reaches the parser (the hub's body is read as a string). A plan must name safe,
//! listed files with well-formed checksums; an error must carry one of the listing's codes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llb::error::ErrorCode;
use llb::pull::plan_from_listing;
use serde_json::Value;

fn check(text: &str, quant: Option<&str>, filename: Option<&str>) {
    match plan_from_listing(text, quant, filename) {
        Ok(plan) => {
            let files = plan["files"].as_array().expect("files");
            assert!(!files.is_empty(), "an empty plan: {plan}");
            for f in files {
                let name = f["name"].as_str().expect("name");
                assert!(
                    !name.is_empty() && !name.starts_with('/') && !name.split('/').any(|p| p == ".." || p.is_empty())
                );
                assert!(name.to_ascii_lowercase().ends_with(".gguf"), "{name}");
                let hex = |s: &Value, n: usize| {
                    s.as_str().is_some_and(|h| h.len() == n && h.bytes().all(|b| b.is_ascii_hexdigit()))
                };
                assert!(
                    hex(&f["sha256"], 64)
                        || hex(&f["sha256"], 40)
                        || hex(&f["git_sha1"], 40)
                        || hex(&f["git_sha1"], 64),
                    "{f}"
                );
                assert!(f["size"].is_u64());
            }
            assert_eq!(plan["commit"].as_str().map(str::len), Some(40));
        }
        Err(e) => assert!(
            matches!(
                e.code,
                ErrorCode::InvalidRepoListing
                    | ErrorCode::RepoDisabled
                    | ErrorCode::NoGguf
                    | ErrorCode::QuantNotFound
                    | ErrorCode::FileNotFound
                    | ErrorCode::InvalidArgument
            ),
            "unexpected error {e}"
        ),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    check(text, None, None);
    check(text, Some("Q4_K_M"), None);
    check(text, Some("q8_0"), None);
    // An explicit file: the last listed name (a shard, an auxiliary file, anything).
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        if let Some(name) = v["siblings"].as_array().and_then(|s| s.iter().rev().find_map(|x| x["rfilename"].as_str()))
        {
            check(text, Some("Q4_K_M"), Some(name));
        }
    }
});
