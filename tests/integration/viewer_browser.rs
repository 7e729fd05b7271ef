//! The run viewer in a real browser: headless Chromium driven through chromedriver over the
//! W3C WebDriver HTTP API. The runs page lists a finished run, a run page shows the next step
//! of a running run without a reload, a gate is approved by clicking, and a report opened
//! from a file shows the run while fetching nothing. Each page is saved as a screenshot under
//! `target/viewer-screenshots/`.
//!
//! Chromium and chromedriver come from Debian's `chromium` and `chromium-driver` (`.ci/run`
//! installs them); `TNH_CHROMIUM` and `TNH_CHROMEDRIVER` name others. Without them the tests
//! say so and pass, unless `TNH_REQUIRE_BROWSER` is set (as CI sets it). Every wait is the
//! browser's own (WebDriver's implicit wait for an element), bounded by a deadline.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{Value, json};

use crate::kernel_support::RunRepo;
use crate::viewer::{Server, hostile_gate_workflow, status_of, waiting_run};

/// How long the browser waits for an element: generous, for a loaded 2-core machine.
const ELEMENT_DEADLINE_MS: u64 = 60_000;

/// The W3C name of an element reference in an answer.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A program named by `variable`, else the first of `names` on PATH or in /usr/bin.
fn program(variable: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut folders: Vec<PathBuf> = std::env::split_paths(&path).collect();
    folders.push(PathBuf::from("/usr/bin"));
    names
        .iter()
        .flat_map(|name| folders.iter().map(move |folder| folder.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Chromium and chromedriver, or `None` (said on stderr) when they are missing and not
/// required.
fn browser_programs() -> Option<(PathBuf, PathBuf)> {
    let chromium = program("TNH_CHROMIUM", &["chromium", "chromium-browser"]);
    let driver = program("TNH_CHROMEDRIVER", &["chromedriver"]);
    match (chromium, driver) {
        (Some(chromium), Some(driver)) => Some((chromium, driver)),
        (chromium, driver) => {
            let missing = format!(
                "chromium found: {}, chromedriver found: {} (Debian packages `chromium` and \
                 `chromium-driver`)",
                chromium.is_some(),
                driver.is_some()
            );
            assert!(
                std::env::var_os("TNH_REQUIRE_BROWSER").is_none(),
                "TNH_REQUIRE_BROWSER is set but the browser is missing: {missing}"
            );
            eprintln!("skipping the browser test: {missing}");
            None
        }
    }
}

/// The one chromedriver of this file, shared by its tests while any runs, stopped after the
/// last.
struct Chromedriver {
    child: Child,
    base: String,
    chromium: PathBuf,
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static DRIVER: Mutex<Weak<Chromedriver>> = Mutex::new(Weak::new());

fn chromedriver(chromium: PathBuf, driver: &Path) -> Arc<Chromedriver> {
    let mut shared = DRIVER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(running) = shared.upgrade() {
        return running;
    }
    // A port free now; chromedriver says when it listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("started successfully"));
    assert!(started, "chromedriver did not start on port {port}");
    // Its later output is drained so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let running = Arc::new(Chromedriver {
        child,
        base: format!("http://127.0.0.1:{port}"),
        chromium,
    });
    *shared = Arc::downgrade(&running);
    running
}

/// Whether this process runs as root (Chromium's sandbox refuses it).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|line| line.starts_with("Uid:"))
            .and_then(|line| line.split_whitespace().nth(1))
            == Some("0")
    })
}

/// A headless browser session, ended when dropped.
struct Browser {
    driver: Arc<Chromedriver>,
    session: String,
    agent: ureq::Agent,
}

impl Browser {
    /// A new session, or `None` when the browser is missing and not required.
    fn open() -> Option<Self> {
        let (chromium, driver) = browser_programs()?;
        let driver = chromedriver(chromium, &driver);
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(180)))
            .build();
        let agent = ureq::Agent::new_with_config(config);
        let mut args = vec![
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
            // The network is off: anything but loopback goes to a closed port.
            "--proxy-server=http://127.0.0.1:9",
        ];
        if is_root() {
            args.push("--no-sandbox");
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": driver.chromium, "args": args},
        }}});
        let answer = call(
            &agent,
            "POST",
            &format!("{}/session", driver.base),
            &capabilities,
        );
        let session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        let browser = Self {
            driver,
            session,
            agent,
        };
        browser.command(
            "POST",
            "timeouts",
            &json!({"implicit": ELEMENT_DEADLINE_MS, "pageLoad": 120_000, "script": 30_000}),
        );
        Some(browser)
    }

    fn command(&self, method: &str, path: &str, body: &Value) -> Value {
        let url = format!("{}/session/{}/{path}", self.driver.base, self.session);
        call(&self.agent, method, &url, body)
    }

    fn goto(&self, url: &str) {
        self.command("POST", "url", &json!({"url": url}));
    }

    /// The element `css` matches, waited for up to the deadline.
    fn find(&self, css: &str) -> String {
        self.find_by("css selector", css)
    }

    fn find_by(&self, using: &str, value: &str) -> String {
        let answer = self.command("POST", "element", &json!({"using": using, "value": value}));
        answer[ELEMENT_KEY]
            .as_str()
            .unwrap_or_else(|| panic!("no element {value} within the deadline: {answer}"))
            .to_owned()
    }

    fn click(&self, element: &str) {
        self.command("POST", &format!("element/{element}/click"), &json!({}));
    }

    fn type_into(&self, element: &str, text: &str) {
        self.command(
            "POST",
            &format!("element/{element}/value"),
            &json!({"text": text}),
        );
    }

    fn script(&self, script: &str) -> Value {
        self.command(
            "POST",
            "execute/sync",
            &json!({"script": script, "args": []}),
        )
    }

    fn text(&self) -> String {
        let body = self.find("body");
        self.command("GET", &format!("element/{body}/text"), &Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Saves the page as `target/viewer-screenshots/NAME.png`.
    fn screenshot(&self, name: &str) {
        let encoded = self.command("GET", "screenshot", &Value::Null);
        let png = base64_decode(encoded.as_str().expect("a screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/viewer-screenshots");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(format!("{name}.png")), png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let url = format!("{}/session/{}", self.driver.base, self.session);
        let _ = self.agent.delete(url).call();
    }
}

/// One WebDriver command: its answer's `value`; a WebDriver error fails the test.
fn call(agent: &ureq::Agent, method: &str, url: &str, body: &Value) -> Value {
    let response = match method {
        "GET" => agent.get(url).call(),
        _ => agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body.to_string()),
    }
    .unwrap_or_else(|error| panic!("{method} {url}: {error}"));
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().unwrap();
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    assert_eq!(status, 200, "{method} {url}: {answer}");
    answer["value"].clone()
}

/// Standard base64, as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |byte: u8| match byte {
        b'A'..=b'Z' => byte - b'A',
        b'a'..=b'z' => byte - b'a' + 26,
        b'0'..=b'9' => byte - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|byte| byte.is_ascii_alphanumeric() || *byte == b'+' || *byte == b'/')
        .map(value)
        .collect();
    let mut bytes = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let word = chunk.iter().enumerate().fold(0u32, |word, (index, digit)| {
            word | (u32::from(*digit) << (18 - 6 * index))
        });
        let whole = word.to_be_bytes();
        bytes.extend_from_slice(&whole[1..chunk.len()]);
    }
    bytes
}

/// The browser signed in to `server` (the token moved into its cookie).
fn signed_in(browser: &Browser, server: &Server) {
    browser.goto(&format!("{}/?token={}", server.base, server.token));
    browser.find("h1");
}

#[test]
fn the_runs_page_lists_a_finished_run() {
    let Some(browser) = Browser::open() else {
        return;
    };
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    repo.conductor_exits(&["gate", "approve", &run_id, "--as", "alice"], 0);
    assert_eq!(status_of(&repo, &run_id), "completed");
    let server = Server::start(repo.path());
    signed_in(&browser, &server);
    let link = browser.find(&format!("table.runs a[href=\"/r/0/{run_id}\"]"));
    browser.find("table.runs .state-completed");
    browser.screenshot("runs");
    browser.click(&link);
    browser.find("table#visits");
    let text = browser.text();
    assert!(text.contains(&format!("Run {run_id}")), "{text}");
    assert!(text.contains("review #1"), "{text}");
    browser.screenshot("run");
}

#[test]
fn a_running_run_shows_its_next_step_without_a_reload() {
    let Some(browser) = Browser::open() else {
        return;
    };
    let repo = RunRepo::new();
    let text = hostile_gate_workflow()
        .replace("gate_approved: STOP", "gate_approved: after")
        .replace(
            "  - id: timed_out\n",
            "  - id: after\n    opcode: RUN_AGENT\n    agent: scripted\n    prompt: |\n      SAY carried on\n    routes:\n      completed: STOP\n      \"*\": failed\n  - id: timed_out\n",
        );
    let workflow = repo.workflow_text("gate.yaml", &text);
    let (run_id, _) = repo.run_exits(&workflow, &[], 3);
    let server = Server::start(repo.path());
    signed_in(&browser, &server);
    browser.goto(&format!("{}/r/0/{run_id}", server.base));
    browser.find("table#visits");
    assert!(!browser.text().contains("after #1"));
    // A mark the page keeps only while it is not loaded again.
    browser.script("window.notReloaded = true;");
    // The run moves on: its gate approved, then it continues to `after` and ends.
    repo.conductor_exits(
        &["gate", "approve", &run_id, "--as", "alice", "--resume"],
        0,
    );
    let row = "//table[@id='visits']//a[text()='after #1']";
    browser.find_by("xpath", row);
    browser.find_by(
        "xpath",
        "//table[@id='visits']//tr[td/a[text()='after #1']]/td[3][text()='completed']",
    );
    assert_eq!(
        browser.script("return window.notReloaded === true;"),
        json!(true)
    );
    // The summary is as loaded; the note under it says where the run is now, and the
    // invitation to decide the gate is gone.
    browser.find_by(
        "xpath",
        "//p[@id='moved' and text()='Since this page was loaded, the run is completed.']",
    );
    assert_eq!(
        browser.script("return document.getElementById('waiting').hidden;"),
        json!(true)
    );
    browser.script("document.getElementById('visits').scrollIntoView();");
    browser.screenshot("run-live");
}

#[test]
fn a_gate_approved_by_clicking_moves_the_run_as_gate_approve_does() {
    let Some(browser) = Browser::open() else {
        return;
    };
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let server = Server::start(repo.path());
    signed_in(&browser, &server);
    browser.goto(&format!("{}/gates", server.base));
    let section = format!("section#run-0-{run_id}");
    let reviewer = browser.find(&format!("{section} input[name=reviewer]"));
    browser.screenshot("gates");
    browser.type_into(&reviewer, "alice");
    let comment = browser.find(&format!("{section} textarea[name=comment]"));
    browser.type_into(&comment, "looks right");
    browser.click(&browser.find(&format!("{section} button[value=approve]")));
    let done = browser.find("pre.done, pre.refused");
    let told = browser
        .command("GET", &format!("element/{done}/text"), &Value::Null)
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(told.contains("approved by alice"), "{told}");
    browser.screenshot("gate-approved");
    // As `gate approve` leaves it: the gate's STOP route ends the run.
    assert_eq!(status_of(&repo, &run_id), "completed");
    let outcome = repo.json(&run_id, "artifacts/review/1/gate_outcome.json");
    assert_eq!(outcome["reviewer"], "alice");
    assert_eq!(outcome["comment"], "looks right");
}

#[test]
fn a_report_opened_from_a_file_shows_the_run_and_fetches_nothing() {
    let Some(browser) = Browser::open() else {
        return;
    };
    let repo = RunRepo::new();
    let run_id = waiting_run(&repo);
    let report = repo.path().join("report.html");
    repo.conductor_exits(&["report", &run_id, "-o", report.to_str().unwrap()], 0);
    browser.goto(&format!("file://{}", report.display()));
    browser.find("#visit-implement-1");
    let text = browser.text();
    assert!(text.contains(&format!("Run {run_id}")), "{text}");
    for step in ["implement #1", "queue #1", "review #1"] {
        assert!(text.contains(step), "{step} in {text}");
    }
    // The agent's markup is shown as text, never run.
    assert!(text.contains("<script>alert(2)</script>"), "{text}");
    let fetched = browser.script(
        "return performance.getEntriesByType('resource').map(function (entry) { return entry.name; });",
    );
    assert_eq!(fetched, json!([]), "the report fetched something");
    browser.screenshot("report");
}
