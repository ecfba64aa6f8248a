//! `fe-host`: parse the command line, run, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Panics inside fe-host are bugs; report them as one line, never as a backtrace.
    fe_plugin_api::install_quiet_panic_hook();
    let cli = match fe_host::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = error.print();
            } else {
                // Errors are one line: clap's first line and its tip, without the usage block.
                eprintln!(
                    "{}",
                    fe_host::cli::one_line_usage_error(&error.render().to_string())
                );
            }
            return ExitCode::from(error.exit_code() as u8);
        }
    };
    match std::panic::catch_unwind(|| fe_host::cli::run(cli)) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(
            error @ (fe_host::Error::Stopped { .. }
            | fe_host::Error::SmokeStopped { .. }
            | fe_host::Error::RankFailed { code: 75, .. }),
        )) => {
            // A stop the user asked for is not an error: say where the run can go on.
            eprintln!("{error}");
            ExitCode::from(error.exit_code() as u8)
        }
        Ok(Err(error)) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code() as u8)
        }
        Err(payload) => {
            let message = fe_plugin_api::panic_message(payload.as_ref());
            let error = match fe_host::cli::stdout_failure(&message) {
                // `fe-host ... | head`: the reader has all it wanted; that is a normal end.
                Some(None) => return ExitCode::SUCCESS,
                Some(Some(error)) => error,
                None => fe_host::Error::Internal(message),
            };
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code() as u8)
        }
    }
}
