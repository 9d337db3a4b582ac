use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use rowbranch::cli::{Cli, Command, LogFormat};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo prints its own story; its server's routine lines would only interleave.
    let default_level = match cli.command {
        Command::Demo => "warn",
        _ => "info",
    };
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|spec| !spec.trim().is_empty())
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(default_level));
    let format = cli.log_format;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(colours(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR"),
            ))
            .init(),
        // One object a line: the event's fields at the top, the run's span (id, branch, repo)
        // under `span`.
        LogFormat::Json => {
            let json = Format::default()
                .json()
                .flatten_event(true)
                .with_current_span(true);
            let lines = SpanFieldsOnTop(json.with_span_list(false));
            logs.json().event_format(lines).init()
        }
    }
    // One worker thread unless `TOKIO_WORKER_THREADS` (tokio's own variable) asks for more.
    // rowbranch waits on GitHub and the database, not on its CPU: a new row costs a fraction of
    // a millisecond, and GitHub takes about 40 new rows a minute. A second worker would only
    // add the cost of handing tasks between threads and waking them, about a third of a new
    // row's CPU (README's Performance).
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        runtime.worker_threads(1);
    }
    let runtime = match runtime.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "could not start the async runtime");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(rowbranch::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let error = format!("{:#}", failure.error());
            match format {
                LogFormat::Text => eprintln!("error: {error}"),
                LogFormat::Json => {
                    tracing::error!(%error, exit_code = failure.exit_code(), "rowbranch failed")
                }
            }
            ExitCode::from(failure.exit_code())
        }
    }
}

/// JSON lines as `Json` writes them, but a line in a delivery's span (`http::webhook`) has the
/// span's fields (delivery, route, table, id, column) at the top as well, beside its own.
struct SpanFieldsOnTop(Format<Json>);

impl<S, N> FormatEvent<S, N> for SpanFieldsOnTop
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        self.0
            .format_event(context, Writer::new(&mut line), event)?;
        let in_delivery = context
            .lookup_current()
            .is_some_and(|s| s.name() == "delivery");
        let parsed = in_delivery.then(|| serde_json::from_str(&line));
        let Some(Ok(serde_json::Value::Object(mut fields))) = parsed else {
            return writer.write_str(&line);
        };
        if let Some(serde_json::Value::Object(span)) = fields.get("span").cloned() {
            for (name, value) in span.into_iter().filter(|(name, _)| name != "name") {
                fields.entry(name).or_insert(value);
            }
        }
        // `timestamp` and `level` first, as on every other line; the rest in the map's order.
        let head = ["timestamp", "level"].map(|key| fields.remove_entry(key));
        writer.write_char('{')?;
        for (n, (key, value)) in head.into_iter().flatten().chain(fields).enumerate() {
            let comma = if n == 0 { "" } else { "," };
            write!(writer, "{comma}{}:{value}", serde_json::Value::String(key))?;
        }
        writeln!(writer, "}}")
    }
}

/// Whether log lines carry colours: on a terminal, unless `NO_COLOR` is set to anything but
/// the empty string (https://no-color.org).
fn colours(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|value| value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colours;

    #[test]
    fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some("".into())));
        assert!(!colours(true, Some("1".into())));
        assert!(!colours(false, None));
    }
}
