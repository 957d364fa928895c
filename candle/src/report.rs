//! The report printed on stdout; its JSON form is `contracts/candle-report.ts`
//! (`contracts/generated/candle-report.schema.json`).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    Validate,
    Quantize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PerplexityReport {
    pub candle: f64,
    pub reference: Option<f64>,
    pub relative_diff: Option<f64>,
    pub tolerance: f64,
    /// The absolute bound checked, when one was given
    pub threshold: Option<f64>,
    pub num_tokens: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct QuantizationReport {
    pub dtype: String,
    pub tensors: usize,
    pub perplexity: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutputFile {
    pub path: String,
    pub size_bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: Command,
    pub ok: bool,
    pub model_dir: String,
    pub checks: Vec<Check>,
    pub perplexity: Option<PerplexityReport>,
    /// Capability retention: perplexity on general text (`validate --general-tokens`)
    pub general_perplexity: Option<PerplexityReport>,
    pub quantization: Option<QuantizationReport>,
    pub outputs: Vec<OutputFile>,
    pub error: Option<String>,
}

impl Report {
    pub fn new(command: Command, model_dir: &str) -> Self {
        Self {
            command,
            ok: false,
            model_dir: model_dir.to_string(),
            checks: Vec::new(),
            perplexity: None,
            general_perplexity: None,
            quantization: None,
            outputs: Vec::new(),
            error: None,
        }
    }

    pub fn check(&mut self, name: &str, ok: bool, detail: impl Into<String>) {
        let detail = detail.into();
        eprintln!(
            "hanzo-ml-candle: [{}] {name}: {detail}",
            if ok { "ok" } else { "FAILED" }
        );
        self.checks.push(Check {
            name: name.to_string(),
            ok,
            detail,
        });
    }

    /// Settles `ok` and `error` once every step has run (or the first fatal one failed).
    pub fn finish(mut self, outcome: anyhow::Result<()>) -> Self {
        if let Err(e) = outcome {
            self.error = Some(format!("{e:#}"));
        } else {
            let failed: Vec<&str> = self
                .checks
                .iter()
                .filter(|c| !c.ok)
                .map(|c| c.name.as_str())
                .collect();
            if !failed.is_empty() {
                self.error = Some(format!("failed checks: {}", failed.join(", ")));
            }
        }
        self.ok = self.error.is_none() && self.checks.iter().all(|c| c.ok);
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the report serializes")
    }

    /// Human-readable summary, one line per check.
    pub fn to_text(&self) -> String {
        let verb = match self.command {
            Command::Validate => "validate",
            Command::Quantize => "quantize",
        };
        let mut s = format!(
            "{verb} {}: {}\n",
            self.model_dir,
            if self.ok { "OK" } else { "FAILED" }
        );
        for c in &self.checks {
            s.push_str(&format!(
                "  [{}] {}: {}\n",
                if c.ok { "ok" } else { "FAILED" },
                c.name,
                c.detail
            ));
        }
        if let Some(p) = &self.perplexity {
            s.push_str(&format!(
                "  perplexity: {:.6} over {} tokens",
                p.candle, p.num_tokens
            ));
            if let (Some(r), Some(d)) = (p.reference, p.relative_diff) {
                s.push_str(&format!(
                    " (reference {r:.6}, relative diff {d:.2e}, tolerance {:.2e})",
                    p.tolerance
                ));
            }
            s.push('\n');
        }
        if let Some(q) = &self.quantization {
            s.push_str(&format!(
                "  quantization: {} over {} tensors",
                q.dtype, q.tensors
            ));
            if let Some(p) = q.perplexity {
                s.push_str(&format!(", perplexity {p:.6}"));
            }
            s.push('\n');
        }
        for o in &self.outputs {
            s.push_str(&format!(
                "  wrote {} ({} bytes, sha256 {})\n",
                o.path, o.size_bytes, o.sha256
            ));
        }
        if let Some(e) = &self.error {
            s.push_str(&format!("  error: {e}\n"));
        }
        s
    }
}

/// A finite number, or None: serde_json would write NaN or infinity as `null`, which the
/// contract does not allow where a number is required.
pub fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}
