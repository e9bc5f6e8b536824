//! `--config FILE`: the flags of `kestrel serve`, `gateway` and `worker` from a TOML file.
//!
//! Keys are the long flag names, with `-` or `_` (`max-num-seqs` or `max_num_seqs`); values
//! are strings, integers, floats, booleans (switches such as `cors`) or arrays (repeatable
//! flags such as `cors-origin`). A flag given on the command line or through its environment
//! variable wins over the file, which wins over the default:
//!
//! ```text
//! argv ─► clap (1st parse) ─► --config? ─► read TOML ─► for each key whose flag is unset
//!      (value source: default or absent) append `--key=value` ─► clap (2nd parse)
//! ```
//!
//! Unknown keys, tables and values of the wrong type are errors that name the key.

use std::any::TypeId;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use toml_edit::{Item, Value};

/// The id of the `--config` argument in the subcommands that have it.
pub const CONFIG_ARG: &str = "config";

/// Parses `argv` as `C`, filling unset flags of the subcommand from its `--config` file.
/// `--help`, `--version` and usage errors exit as clap does.
pub fn parse<C: clap::Parser>(argv: Vec<OsString>) -> Result<C> {
    Ok(C::parse_from(args_with_file::<C>(argv)?))
}

/// `argv` with the flags of the subcommand's `--config` file (if any) added.
pub fn args_with_file<C: clap::Parser>(argv: Vec<OsString>) -> Result<Vec<OsString>> {
    // A lenient first pass finds `--config` even when the file supplies required flags.
    let first = C::command()
        .ignore_errors(true)
        .try_get_matches_from(argv.clone());
    let extra = match first.as_ref().ok().and_then(ArgMatches::subcommand) {
        Some((name, sub)) => match config_path(sub) {
            Some(path) => file_args(&C::command(), name, sub, &path)?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    Ok(with_extra(argv, extra))
}

/// The `--config` path given to subcommand `sub`, if it has the flag and it was given.
fn config_path(sub: &ArgMatches) -> Option<PathBuf> {
    sub.try_get_one::<PathBuf>(CONFIG_ARG)
        .ok()
        .flatten()
        .cloned()
}

/// `argv` with `extra` added before a `--` (if any), else at the end.
fn with_extra(mut argv: Vec<OsString>, extra: Vec<OsString>) -> Vec<OsString> {
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    argv.splice(at..at, extra);
    argv
}

/// The arguments the file at `path` adds to subcommand `name` of `root`.
fn file_args(root: &Command, name: &str, sub: &ArgMatches, path: &Path) -> Result<Vec<OsString>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let mut root = root.clone();
    root.build();
    let cmd = root
        .find_subcommand(name)
        .with_context(|| format!("no subcommand {name}"))?;
    args_from_toml(cmd, sub, &text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The arguments TOML `text` adds to `cmd`, given what `sub` already set.
pub fn args_from_toml(cmd: &Command, sub: &ArgMatches, text: &str) -> Result<Vec<OsString>> {
    let doc = toml_edit::Document::parse(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = Vec::new();
    for (key, item) in doc.as_table().iter() {
        let Item::Value(value) = item else {
            bail!("`{key}` is a table; the file takes flags only (`key = value` lines)");
        };
        let arg = find_arg(cmd, key)?;
        if set_elsewhere(cmd, sub, arg) {
            continue;
        }
        out.extend(flag_args(arg, key, value)?);
    }
    Ok(out)
}

/// The flag `key` names (`max_num_seqs`, `max-num-seqs` or a visible alias such as `host`).
fn find_arg<'a>(cmd: &'a Command, key: &str) -> Result<&'a Arg> {
    let long = key.replace('_', "-");
    let settable = |a: &&Arg| {
        a.get_long().is_some() && !matches!(a.get_id().as_str(), CONFIG_ARG | "help" | "version")
    };
    cmd.get_arguments()
        .filter(settable)
        .find(|a| {
            a.get_long() == Some(long.as_str())
                || a.get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&long.as_str()))
        })
        .with_context(|| {
            format!(
                "unknown key `{key}`: `kestrel {}` has no flag --{long}",
                cmd.get_name()
            )
        })
}

/// Whether the command line or an environment variable set `arg` (then the file yields).
fn set_elsewhere(cmd: &Command, sub: &ArgMatches, arg: &Arg) -> bool {
    // Only ids of `cmd`'s arguments may be asked about (clap checks in debug builds).
    let given = |id: &str| {
        cmd.get_arguments().any(|a| a.get_id() == id)
            && matches!(
                sub.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
    };
    // `kestrel serve MODEL` sets the model as `--model` does.
    given(arg.get_id().as_str()) || (arg.get_id() == "model" && given("model_path"))
}

/// `--long=value` arguments for `value`, checked against the flag's kind and parser.
fn flag_args(arg: &Arg, key: &str, value: &Value) -> Result<Vec<OsString>> {
    let long = arg.get_long().unwrap_or(key);
    match arg.get_action() {
        ArgAction::SetTrue | ArgAction::SetFalse => match value {
            Value::Boolean(b) if *b.value() => Ok(vec![format!("--{long}").into()]),
            Value::Boolean(_) => Ok(Vec::new()),
            other => bail!(
                "`{key}` must be a boolean (true or false), not {}",
                other.type_name()
            ),
        },
        ArgAction::Append => {
            let items: Vec<&Value> = match value {
                Value::Array(a) => a.iter().collect(),
                scalar => vec![scalar],
            };
            items
                .into_iter()
                .map(|v| checked(arg, key, v).map(|s| format!("--{long}={s}").into()))
                .collect()
        }
        _ => {
            let text = checked(arg, key, value)?;
            Ok(vec![format!("--{long}={text}").into()])
        }
    }
}

/// `value` as the flag's text, after its parser accepted it.
fn checked(arg: &Arg, key: &str, value: &Value) -> Result<String> {
    let expected = expected_type(arg);
    let text = match value {
        Value::String(s) => s.value().clone(),
        Value::Integer(i) => i.value().to_string(),
        Value::Float(f) => f.value().to_string(),
        other => bail!("`{key}` must be {expected}, not {}", other.type_name()),
    };
    if let Err(e) = parse_alone(arg, &text) {
        let why = std::error::Error::source(&e)
            .map_or_else(|| e.kind().to_string(), |source| source.to_string());
        bail!("`{key}` must be {expected}; {text:?} is not ({why})");
    }
    Ok(text)
}

/// Parses `text` with `arg`'s value parser alone (no environment, no relations to other flags).
fn parse_alone(arg: &Arg, text: &str) -> Result<ArgMatches, clap::Error> {
    let id = arg.get_id().clone();
    let probe = Arg::new(id)
        .long("value")
        .value_parser(arg.get_value_parser().clone())
        .allow_hyphen_values(true);
    Command::new("config")
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from([format!("--value={text}")])
}

/// What the flag takes, in words.
fn expected_type(arg: &Arg) -> String {
    let values = arg.get_possible_values();
    if !values.is_empty() {
        let names: Vec<&str> = values.iter().map(|v| v.get_name()).collect();
        return format!("one of {}", names.join(", "));
    }
    let t = arg.get_value_parser().type_id();
    let integers = [
        TypeId::of::<usize>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
    ];
    if integers.iter().any(|i| t == *i) {
        "an integer".into()
    } else if t == TypeId::of::<u64>() {
        // Plain integers and sizes (`--kv-cache-memory 2GiB`) are both u64.
        "an integer or a size such as \"2GiB\"".into()
    } else if t == TypeId::of::<f64>() {
        "a number".into()
    } else {
        "a string".into()
    }
}

/// Logs which config file the flags came from, if any.
pub fn log_source(path: Option<&Path>) {
    if let Some(path) = path {
        tracing::info!(path = %path.display(), "flags read from the config file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    use crate::Cli;

    /// A config file with `text` in a fresh temporary directory.
    fn file(name: &str, text: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kestrel-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kestrel.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `kestrel serve --config FILE extra...` parsed, or the error text.
    fn serve(text: &str, name: &str, extra: &[&str]) -> Result<crate::serve::ServeArgs, String> {
        let path = file(name, text);
        let mut argv: Vec<OsString> = vec!["kestrel".into(), "serve".into(), "--config".into()];
        argv.push(path.into());
        argv.extend(extra.iter().map(OsString::from));
        let argv = args_with_file::<Cli>(argv).map_err(|e| format!("{e:#}"))?;
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            crate::Command::Serve(args) => Ok(*args),
            _ => Err("not serve".into()),
        }
    }

    #[test]
    fn the_example_file_loads() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/kestrel.example.toml"
        ))
        .unwrap();
        let args = serve(&text, "example", &[]).unwrap();
        assert_eq!(args.engine.served_model_name.as_deref(), Some("assistant"));
        assert_eq!(args.engine.threads, Some(8));
        assert_eq!(args.engine.kv_cache_memory, 2 << 30);
        assert_eq!(args.limits.max_queue_time, Some(30.0));
        if std::env::var_os("HOSTNAME").is_none() {
            assert_eq!(args.http.hostname, "127.0.0.1");
        }
        assert!(!args.engine.no_prefix_caching);
    }

    #[test]
    fn keys_take_dashes_or_underscores_and_flags_win() {
        let text = "max-num-seqs = 7\nmax_num_batched_tokens = 99\nport = 1234\ncors = true\n\
                    cors_origin = [\"https://a.example\", \"https://b.example\"]\n\
                    min_client_priority = -3\nhost = \"0.0.0.0\"\n";
        let args = serve(text, "dashes", &["--port", "9"]).unwrap();
        assert_eq!(args.engine.max_num_seqs, 7);
        assert_eq!(args.engine.max_num_batched_tokens, 99);
        assert_eq!(args.http.port, 9, "the flag beats the file");
        assert!(args.http.cors);
        assert_eq!(
            args.http.cors_origins,
            ["https://a.example", "https://b.example"]
        );
        assert_eq!(args.limits.min_client_priority, -3);
        if std::env::var_os("HOSTNAME").is_none() {
            assert_eq!(args.http.hostname, "0.0.0.0", "`host` is an alias");
        }
    }

    #[test]
    fn the_model_argument_beats_the_model_key() {
        let args = serve(
            "model = \"/from/file.gguf\"\n",
            "model",
            &["/from/argv.gguf"],
        )
        .unwrap();
        assert_eq!(
            args.model_path.as_deref(),
            Some(Path::new("/from/argv.gguf"))
        );
        assert!(args.engine.model.is_empty());
        let args = serve("model = \"/from/file.gguf\"\n", "model2", &[]).unwrap();
        assert_eq!(args.engine.model, [Path::new("/from/file.gguf")]);
    }

    #[test]
    fn bad_files_name_the_key_and_what_it_takes() {
        let err = |text: &str, name: &str| serve(text, name, &[]).err().unwrap();
        let e = err("max_num_seq = 3\n", "unknown");
        assert!(
            e.contains("unknown key `max_num_seq`") && e.contains("--max-num-seq"),
            "{e}"
        );
        assert!(e.contains("kestrel.toml"), "the error names the file: {e}");
        let e = err("max_num_seqs = \"many\"\n", "int");
        assert!(e.contains("`max_num_seqs` must be an integer"), "{e}");
        let e = err("cors = \"yes\"\n", "bool");
        assert!(e.contains("`cors` must be a boolean"), "{e}");
        let e = err("kv_cache_dtype = \"f64\"\n", "enum");
        assert!(
            e.contains("`kv_cache_dtype` must be") && e.contains("f64"),
            "{e}"
        );
        let e = err("port = [1, 2]\n", "array");
        assert!(e.contains("`port` must be an integer, not array"), "{e}");
        let e = err("[serve]\nport = 1\n", "table");
        assert!(e.contains("`serve` is a table"), "{e}");
        let e = err("port = \n", "syntax");
        assert!(e.contains("kestrel.toml"), "{e}");
        let e = err("config = \"other.toml\"\n", "nested");
        assert!(e.contains("unknown key `config`"), "{e}");
    }

    #[test]
    fn extra_arguments_go_before_a_double_dash() {
        let argv = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            with_extra(argv(&["k", "serve", "--", "x"]), argv(&["--port=1"])),
            argv(&["k", "serve", "--port=1", "--", "x"])
        );
        assert_eq!(
            with_extra(argv(&["k", "serve"]), argv(&["--port=1"])),
            argv(&["k", "serve", "--port=1"])
        );
    }
}
