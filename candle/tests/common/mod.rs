//! Shared by the integration tests: the fixture's location, running the built binary, and a check
//! of its JSON report against the contract's generated JSON Schema.

#![allow(dead_code)] // each test binary uses its own subset

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The crate's directory as cargo names it when it runs the tests, not when it compiled them: the target
/// directory is a cache shared by checkouts in other places, and a binary built for one must not read another's
/// files (cargo does not rebuild a test binary when only the checkout's location changed).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"))
}

pub fn fixture_dir() -> PathBuf {
    crate_dir().join("tests/fixtures/tiny-llama")
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub struct Run {
    pub code: i32,
    pub report: Value,
    pub stderr: String,
}

/// Runs `hanzo-ml-candle ARGS` and parses stdout as the one JSON report it must print.
pub fn run_cli(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_hanzo-ml-candle"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("stdout is not one JSON object ({e}):\n{stdout}\nstderr:\n{stderr}")
    });
    assert_matches_contract(&report);
    Run {
        code: out.status.code().unwrap_or(-1),
        report,
        stderr,
    }
}

/// Validates `report` against contracts/generated/candle-report.schema.json. Covers the keywords
/// that schema uses; properties it does not declare are rejected too, so the report matches the
/// contract exactly.
pub fn assert_matches_contract(report: &Value) {
    let schema_path = crate_dir().join("../contracts/generated/candle-report.schema.json");
    let schema = read_json(&schema_path);
    let mut errors = Vec::new();
    validate(&schema, report, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "report does not match the contract: {errors:#?}\n{report:#}"
    );
}

fn validate(schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
        let any = options.iter().any(|s| {
            let mut e = Vec::new();
            validate(s, v, at, &mut e);
            e.is_empty()
        });
        if !any {
            errors.push(format!("{at}: matches none of anyOf"));
        }
        return;
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !types.iter().any(|t| has_type(v, t)) {
            errors.push(format!("{at}: expected {types:?}, got {v}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            errors.push(format!("{at}: {v} not in {allowed:?}"));
        }
    }
    if let (Some(s), Some(n)) = (v.as_str(), schema.get("minLength").and_then(Value::as_u64)) {
        if (s.chars().count() as u64) < n {
            errors.push(format!("{at}: shorter than {n}"));
        }
    }
    if let (Some(s), Some(n)) = (v.as_str(), schema.get("maxLength").and_then(Value::as_u64)) {
        if (s.chars().count() as u64) > n {
            errors.push(format!("{at}: longer than {n}"));
        }
    }
    if let (Some(x), Some(min)) = (v.as_f64(), schema.get("minimum").and_then(Value::as_f64)) {
        if x < min {
            errors.push(format!("{at}: {x} below {min}"));
        }
    }
    if let Some(obj) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for key in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(key) {
                errors.push(format!("{at}: missing `{key}`"));
            }
        }
        for (key, value) in obj {
            match props.and_then(|p| p.get(key)) {
                Some(s) => validate(s, value, &format!("{at}.{key}"), errors),
                None => errors.push(format!("{at}: unexpected property `{key}`")),
            }
        }
    }
    if let (Some(items), Some(schema)) = (v.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            validate(schema, item, &format!("{at}[{i}]"), errors);
        }
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        _ => false,
    }
}
