//! `mock-model --port P [--verbose]`: the mock model server of `tether_testkit::mock_model`
//! as a program, for benchmarks and manual runs of the real agent CLIs. Prints
//! `mock-model listening on http://127.0.0.1:P` once it accepts connections.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use tether_testkit::mock_model::MockModel;

#[derive(Debug, Parser)]
#[command(
    name = "mock-model",
    about = "Mock OpenAI/Anthropic/Gemini model server"
)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Log every request to stderr.
    #[arg(long)]
    verbose: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let model = match MockModel::bind(addr, args.verbose).await {
        Ok(m) => m,
        Err(e) => {
            eprintln!("mock-model: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("mock-model listening on {}", model.base_url());
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
