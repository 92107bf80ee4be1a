//! `tether-test-pg start DIR` starts a private PostgreSQL cluster in `DIR` (see
//! `tether_testkit::postgres`) and prints its admin URL, for `TETHER_TEST_DATABASE_URL`;
//! `tether-test-pg stop DIR` stops it (immediately, like a crash) and `tether-test-pg
//! start-again DIR` starts it again on the same port (a database restart, for the
//! browser tests). `scripts/test` brings one server up for the whole
//! run this way (and stops it in a trap), so tests only create databases.

use std::path::PathBuf;
use std::process::ExitCode;

use tether_testkit::postgres::PgServer;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [cmd, dir] if cmd == "start" => PgServer::start_in(&PathBuf::from(dir)).map(|server| {
            println!("{}", server.url());
        }),
        [cmd, dir] if cmd == "stop" => PgServer::stop_in(&PathBuf::from(dir)),
        [cmd, dir] if cmd == "start-again" => PgServer::start_again_in(&PathBuf::from(dir)),
        _ => {
            eprintln!("usage: tether-test-pg start|stop|start-again DIR");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tether-test-pg: {e:#}");
            ExitCode::FAILURE
        }
    }
}
