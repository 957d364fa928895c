//! hanzo-ml-candle: checks merged Llama checkpoints with Candle (finite logits, perplexity against
//! PyTorch's) and exports them as llama.cpp-style GGUF files that are read back and checked too.

pub mod commands;
pub mod config;
pub mod gguf;
pub mod model;
pub mod perplexity;
pub mod report;
pub mod tokenizer;
pub mod weights;
