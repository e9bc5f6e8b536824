//! [`ModelRegistry`] with a loader that counts its loads: which model is unloaded for
//! another (the least recently used idle one, never a pinned or busy one), that requests for a
//! loading model share one load, that a failed load reaches every waiter and leaves the
//! registry serving, how `unload` refuses, how a memory budget unloads as many models as it
//! takes and refuses one that can never fit, and that aliases name their model.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kestrel_server::fuzz_entry::fuzz_state;
use kestrel_server::model_registry::{
    LoadFailure, ModelEntry, ModelLoader, ModelRegistry, RegistryError, RegistryOptions,
};
use kestrel_server::model_slot::ModelState;
use kestrel_server::{AppState, ServerConfig};

/// Loads any model as the fuzz state after `delay`; refuses paths ending in `.bad`. A model's
/// memory estimate is the number in its path's stem after `-` (`a-300.gguf`: 300), else 0.
struct CountingLoader {
    loads: Mutex<Vec<String>>,
    delay: Duration,
}

impl ModelLoader for CountingLoader {
    fn memory_estimate(&self, path: &Path) -> u64 {
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        stem.rsplit_once('-')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0)
    }

    fn load(&self, name: &str, path: &Path) -> Result<AppState, LoadFailure> {
        std::thread::sleep(self.delay);
        self.loads.lock().unwrap().push(name.to_string());
        if path.extension().is_some_and(|e| e == "bad") {
            return Err(LoadFailure(format!("{} is not a model", path.display())));
        }
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |p: &str| std::fs::read_to_string(repo.join(p)).unwrap();
        Ok(fuzz_state(
            &read("tests/fixtures/tiny-qwen2/tokenizer.json"),
            &read("fuzz/assets/tokenizer_config.json"),
        )
        .unwrap())
    }
}

fn registry(
    names: &[&str],
    pins: &[&str],
    max_loaded: usize,
    delay: Duration,
    load_wait: Option<Duration>,
) -> (Arc<ModelRegistry>, Arc<CountingLoader>) {
    let options = RegistryOptions {
        load_wait,
        ..options(max_loaded)
    };
    build(names, pins, options, delay)
}

fn options(max_loaded: usize) -> RegistryOptions {
    RegistryOptions {
        max_loaded,
        load_wait: None,
        unload_deadline: Duration::from_secs(1),
        memory_budget: None,
        aliases: Vec::new(),
        lora_modules: Vec::new(),
    }
}

/// A registry of `names` (each `NAME` or `NAME-BYTES`, served as `NAME`).
fn build(
    names: &[&str],
    pins: &[&str],
    options: RegistryOptions,
    delay: Duration,
) -> (Arc<ModelRegistry>, Arc<CountingLoader>) {
    let loader = Arc::new(CountingLoader {
        loads: Mutex::new(Vec::new()),
        delay,
    });
    let models = names
        .iter()
        .map(|n| ModelEntry {
            name: n.split('-').next().unwrap_or(n).to_string(),
            path: PathBuf::from(format!("{n}.gguf").replace("bad.gguf", "x.bad")),
        })
        .collect();
    let pins: Vec<String> = pins.iter().map(|p| p.to_string()).collect();
    let registry = ModelRegistry::new(
        models,
        &pins,
        loader.clone(),
        ServerConfig::default(),
        options,
    )
    .unwrap();
    (Arc::new(registry), loader)
}

fn states(registry: &ModelRegistry) -> Vec<ModelState> {
    registry.listing().into_iter().map(|m| m.state).collect()
}

use ModelState::{Loaded, Unloaded};

#[tokio::test]
async fn the_least_recently_used_idle_model_makes_room() {
    let (reg, loader) = registry(&["a", "b", "c"], &[], 2, Duration::ZERO, None);
    assert_eq!(states(&reg), [Unloaded, Unloaded, Unloaded]);
    drop(reg.acquire("a").await.unwrap());
    drop(reg.acquire("b").await.unwrap());
    drop(reg.acquire("a").await.unwrap());
    drop(reg.acquire("c").await.unwrap());
    assert_eq!(
        states(&reg),
        [Loaded, Unloaded, Loaded],
        "b was used longest ago"
    );
    drop(reg.acquire("b").await.unwrap());
    assert_eq!(states(&reg), [Unloaded, Loaded, Loaded]);
    assert_eq!(*loader.loads.lock().unwrap(), ["a", "b", "c", "b"]);
}

#[tokio::test]
async fn pinned_and_held_models_are_never_unloaded() {
    let (reg, _) = registry(&["a", "b", "c"], &["a"], 2, Duration::ZERO, None);
    drop(reg.acquire("a").await.unwrap());
    let held = reg.acquire("b").await.unwrap();
    match reg.acquire("c").await {
        Err(RegistryError::NoRoom { name, loaded }) => {
            assert_eq!((name.as_str(), loaded), ("c", 2))
        }
        other => panic!("expected NoRoom, got {:?}", other.err()),
    }
    assert!(matches!(reg.unload("b").await, Err(RegistryError::Busy(_))));
    assert!(matches!(
        reg.unload("a").await,
        Err(RegistryError::Pinned(_))
    ));
    drop(held);
    drop(reg.acquire("c").await.unwrap());
    assert_eq!(states(&reg), [Loaded, Unloaded, Loaded]);
}

#[tokio::test]
async fn requests_for_a_loading_model_share_one_load() {
    let (reg, loader) = registry(&["a"], &[], 1, Duration::from_millis(200), None);
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let reg = reg.clone();
            tokio::spawn(async move { reg.acquire("a").await.map(|_| ()) })
        })
        .collect();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    assert_eq!(*loader.loads.lock().unwrap(), ["a"]);
}

#[tokio::test]
async fn a_failed_load_reaches_every_waiter_and_the_others_serve() {
    let (reg, _) = registry(&["bad", "good"], &[], 1, Duration::from_millis(100), None);
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let reg = reg.clone();
            tokio::spawn(async move { reg.acquire("bad").await.map(|_| ()) })
        })
        .collect();
    for w in waiters {
        match w.await.unwrap() {
            Err(RegistryError::LoadFailed { name, reason }) => {
                assert_eq!(name, "bad");
                assert!(reason.contains("not a model"), "{reason}");
            }
            other => panic!("expected LoadFailed, got {other:?}"),
        }
    }
    let listed = reg.listing();
    assert_eq!(listed[0].state, Unloaded);
    assert!(listed[0].error.as_deref().unwrap().contains("not a model"));
    drop(reg.acquire("good").await.unwrap());
    assert_eq!(states(&reg), [Unloaded, Loaded]);
}

#[tokio::test]
async fn a_load_slower_than_the_wait_limit_times_out_and_completes_later() {
    let wait = Some(Duration::from_millis(50));
    let (reg, _) = registry(&["a"], &[], 1, Duration::from_millis(400), wait);
    assert!(matches!(
        reg.acquire("a").await,
        Err(RegistryError::LoadTimeout { .. })
    ));
    assert_eq!(states(&reg), [ModelState::Loading]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(states(&reg), [Loaded]);
    drop(reg.acquire("a").await.unwrap());
}

#[tokio::test]
async fn unload_names_what_it_refuses() {
    let (reg, _) = registry(&["a"], &[], 1, Duration::ZERO, None);
    assert!(matches!(
        reg.unload("zz").await,
        Err(RegistryError::Unknown(_))
    ));
    assert!(!reg.unload("a").await.unwrap(), "nothing to unload yet");
    drop(reg.acquire("a").await.unwrap());
    assert!(reg.unload("a").await.unwrap());
    assert_eq!(states(&reg), [Unloaded]);
    assert!(matches!(
        reg.acquire("zz").await,
        Err(RegistryError::Unknown(_))
    ));
}

#[test]
fn bad_configurations_are_refused() {
    let loader = Arc::new(CountingLoader {
        loads: Mutex::new(Vec::new()),
        delay: Duration::ZERO,
    });
    let entry = |n: &str| ModelEntry {
        name: n.into(),
        path: PathBuf::from(n),
    };
    let make = |models: Vec<ModelEntry>, pins: &[String], max| {
        ModelRegistry::new(
            models,
            pins,
            loader.clone(),
            ServerConfig::default(),
            options(max),
        )
        .err()
        .map(|e| e.to_string())
    };
    assert!(make(vec![], &[], 1).is_some());
    assert!(make(vec![entry("a"), entry("a")], &[], 1)
        .unwrap()
        .contains("twice"));
    assert!(make(vec![entry("a")], &["b".into()], 1)
        .unwrap()
        .contains("--pin b"));
    let pins = ["a".to_string(), "b".to_string()];
    assert!(make(vec![entry("a"), entry("b")], &pins, 1)
        .unwrap()
        .contains("--max-loaded-models"));
    assert!(make(vec![entry("a")], &[], 0).is_some());
    assert!(make(vec![entry("a")], &[], 1).is_none());
    let with_alias = |alias: &str, model: &str| {
        let options = RegistryOptions {
            aliases: vec![(alias.to_string(), model.to_string())],
            ..options(2)
        };
        ModelRegistry::new(
            vec![entry("a"), entry("b")],
            &[],
            loader.clone(),
            ServerConfig::default(),
            options,
        )
        .err()
        .map(|e| e.to_string())
    };
    assert!(with_alias("b", "a").unwrap().contains("--model-alias b"));
    assert!(with_alias("x", "c")
        .unwrap()
        .contains("no model is named `c`"));
    assert!(with_alias("x", "a").is_none());
}

#[tokio::test]
async fn the_memory_budget_unloads_as_many_idle_models_as_it_takes() {
    let budget = RegistryOptions {
        memory_budget: Some(1000),
        ..options(10)
    };
    let (reg, loader) = build(
        &["a-300", "b-300", "c-300", "d-700", "e-1001"],
        &[],
        budget,
        Duration::ZERO,
    );
    for name in ["a", "b", "c"] {
        drop(reg.acquire(name).await.unwrap());
    }
    assert_eq!(states(&reg), [Loaded, Loaded, Loaded, Unloaded, Unloaded]);
    drop(reg.acquire("a").await.unwrap());
    // 900 loaded: d (700) needs b and c (the least recently used) gone, not a.
    drop(reg.acquire("d").await.unwrap());
    assert_eq!(states(&reg), [Loaded, Unloaded, Unloaded, Loaded, Unloaded]);
    let listed: u64 = reg
        .listing()
        .iter()
        .filter(|m| m.state == Loaded)
        .map(|m| m.memory_estimate)
        .sum();
    assert_eq!(listed, 1000);
    match reg.acquire("e").await {
        Err(RegistryError::TooLarge { need, budget, .. }) => {
            assert_eq!((need, budget), (1001, 1000))
        }
        other => panic!("expected TooLarge, got {:?}", other.err()),
    }
    // A held model is not unloaded: b (300) finds no room while a and d are busy.
    let (_a, _d) = (
        reg.acquire("a").await.unwrap(),
        reg.acquire("d").await.unwrap(),
    );
    assert!(matches!(
        reg.acquire("b").await,
        Err(RegistryError::NoRoom { .. })
    ));
    assert_eq!(*loader.loads.lock().unwrap(), ["a", "b", "c", "d"]);
}

#[tokio::test]
async fn an_alias_names_its_model_everywhere() {
    let aliased = RegistryOptions {
        aliases: vec![("smol".into(), "a".into())],
        ..options(1)
    };
    let (reg, loader) = build(&["a", "b"], &["smol"], aliased, Duration::ZERO);
    assert_eq!(reg.resolve("smol").as_deref(), Some("a"));
    assert_eq!(reg.resolve("b").as_deref(), Some("b"));
    assert_eq!(reg.resolve("zz"), None);
    drop(reg.acquire("smol").await.unwrap());
    drop(reg.acquire("a").await.unwrap());
    assert_eq!(
        *loader.loads.lock().unwrap(),
        ["a"],
        "one model, loaded once"
    );
    assert!(
        matches!(reg.unload("smol").await, Err(RegistryError::Pinned(_))),
        "pinned by its alias"
    );
    assert_eq!(reg.listing()[0].aliases, ["smol"]);
}
