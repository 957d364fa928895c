//! `hanzo-ml-candle validate|quantize ...`: the report goes to stdout (`--json` for one JSON
//! object), progress to stderr; the exit status is 0 only when every check passed.

use anyhow::anyhow;
use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use hanzo_ml_candle::commands::{run_quantize, run_validate, QuantizeArgs, ValidateArgs};
use hanzo_ml_candle::report::{Command as ReportCommand, Report};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "hanzo-ml-candle",
    version,
    about = "Validate merged Llama checkpoints with Candle and export them to GGUF"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check config, weights, finite logits and (optionally) perplexity against a reference
    Validate(ValidateArgs),
    /// Write a llama.cpp-style GGUF file, read it back and check it
    Quantize(QuantizeArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let (report, json) = match &cli.command {
        Command::Validate(args) => (run_validate(args), args.json),
        Command::Quantize(args) => (run_quantize(args), args.json),
    };
    print!(
        "{}",
        if json {
            report.to_json() + "\n"
        } else {
            report.to_text()
        }
    );
    if report.ok {
        ExitCode::SUCCESS
    } else {
        if let Some(e) = &report.error {
            eprintln!("hanzo-ml-candle: error: {e}");
        }
        ExitCode::FAILURE
    }
}

/// Bad arguments still yield a JSON report when `--json` was asked for, so callers that parse
/// stdout always get one; the exit status is clap's usual 2.
fn usage_error(e: clap::Error) -> ExitCode {
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let args: Vec<String> = std::env::args().collect();
    let command = match args.get(1).map(String::as_str) {
        Some("validate") => Some(ReportCommand::Validate),
        Some("quantize") => Some(ReportCommand::Quantize),
        _ => None,
    };
    if let (Some(command), true) = (command, args.iter().any(|a| a == "--json")) {
        let model_dir = args
            .iter()
            .position(|a| a == "--model")
            .and_then(|i| args.get(i + 1).cloned())
            .or_else(|| {
                args.iter()
                    .find_map(|a| a.strip_prefix("--model=").map(str::to_string))
            })
            .unwrap_or_default();
        let message = e.render().to_string();
        let report =
            Report::new(command, &model_dir).finish(Err(anyhow!(message.trim().to_string())));
        println!("{}", report.to_json());
    }
    let _ = e.print();
    ExitCode::from(2)
}
