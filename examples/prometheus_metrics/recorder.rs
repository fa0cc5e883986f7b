//! A small `metrics` recorder that keeps every counter, gauge and histogram in memory and
//! renders them in Prometheus's text exposition format (version 0.0.4), with a loopback HTTP
//! endpoint on `std::net`: what the example needs, without an exporter crate and its async
//! runtime.
//!
//! Counters and gauges are atomics (the `metrics` crate implements both on `AtomicU64`);
//! histograms count into fixed buckets (Prometheus's default ones, in seconds) under a mutex,
//! which is cheap for what this consumer records into them (commits and rebalances).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Upper bounds of the histogram buckets, in seconds (`+Inf` follows).
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One histogram's buckets (not cumulative), sum and count.
#[derive(Default)]
pub struct Buckets {
    state: Mutex<(Vec<u64>, f64, u64)>,
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (counts, sum, count) = &mut *state;
        if counts.is_empty() {
            counts.resize(BUCKETS.len(), 0);
        }
        if let Some(i) = BUCKETS.iter().position(|le| value <= *le) {
            counts[i] += 1;
        }
        *sum += value;
        *count += 1;
    }
}

#[derive(Default)]
struct Store {
    counters: HashMap<Key, Arc<AtomicU64>>,
    gauges: HashMap<Key, Arc<AtomicU64>>,
    histograms: HashMap<Key, Arc<Buckets>>,
    /// Per metric name: its help text (with the unit, if any).
    help: HashMap<String, String>,
}

/// The recorder; clones share the same metrics (install one, keep another to render).
#[derive(Clone, Default)]
pub struct TextRecorder {
    store: Arc<Mutex<Store>>,
}

impl TextRecorder {
    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn describe(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        let help = match unit.map(|unit| unit.as_canonical_label()) {
            Some(unit) if !unit.is_empty() => format!("{description} ({unit})"),
            _ => description.to_string(),
        };
        self.store().help.insert(key.as_str().to_string(), help);
    }

    /// Every metric in Prometheus's text exposition format, sorted by name and labels.
    pub fn render(&self) -> String {
        let store = self.store();
        // name -> (type, [(labels, sample lines)])
        let mut families: BTreeMap<&str, (&str, Vec<String>)> = BTreeMap::new();
        for (key, value) in &store.counters {
            let line = format!(
                "{}{} {}",
                key.name(),
                labels(key, None),
                value.load(Ordering::Relaxed)
            );
            families
                .entry(key.name())
                .or_insert(("counter", Vec::new()))
                .1
                .push(line);
        }
        for (key, value) in &store.gauges {
            let value = f64::from_bits(value.load(Ordering::Relaxed));
            let line = format!("{}{} {}", key.name(), labels(key, None), number(value));
            families
                .entry(key.name())
                .or_insert(("gauge", Vec::new()))
                .1
                .push(line);
        }
        for (key, buckets) in &store.histograms {
            let state = buckets.state.lock().unwrap_or_else(PoisonError::into_inner);
            let (counts, sum, count) = &*state;
            let lines = &mut families
                .entry(key.name())
                .or_insert(("histogram", Vec::new()))
                .1;
            let mut cumulative = 0;
            let mut block = String::new();
            for (i, le) in BUCKETS.iter().enumerate() {
                cumulative += counts.get(i).copied().unwrap_or(0);
                let le = number(*le);
                block += &format!(
                    "{}_bucket{} {cumulative}\n",
                    key.name(),
                    labels(key, Some(&le))
                );
            }
            block += &format!(
                "{}_bucket{} {count}\n",
                key.name(),
                labels(key, Some("+Inf"))
            );
            block += &format!("{}_sum{} {}\n", key.name(), labels(key, None), number(*sum));
            block += &format!("{}_count{} {count}", key.name(), labels(key, None));
            lines.push(block);
        }
        let mut out = String::new();
        for (name, (kind, mut lines)) in families {
            if let Some(help) = store.help.get(name) {
                out += &format!("# HELP {name} {}\n", escape(help, false));
            }
            out += &format!("# TYPE {name} {kind}\n");
            lines.sort();
            for line in lines {
                out += &line;
                out.push('\n');
            }
        }
        out
    }

    /// Serves `GET /metrics` on `listener` (one short request per connection), on a thread of
    /// its own, for as long as the process runs.
    pub fn serve(&self, listener: TcpListener) {
        let recorder = self.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Err(error) = recorder.answer(stream) {
                    eprintln!("metrics request failed: {error}");
                }
            }
        });
    }

    fn answer(&self, stream: TcpStream) -> std::io::Result<()> {
        let mut request = String::new();
        let mut reader = BufReader::new(stream.try_clone()?);
        reader.read_line(&mut request)?;
        // The headers are read and ignored, up to the blank line that ends them.
        let mut header = String::new();
        while reader.read_line(&mut header)? > 2 {
            header.clear();
        }
        let (status, body) = if request.starts_with("GET /metrics ") {
            ("200 OK", self.render())
        } else {
            ("404 Not Found", "only GET /metrics is served\n".to_string())
        };
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        stream.flush()
    }
}

/// `{a="1",b="2"}` with an optional `le` last, or nothing without labels.
fn labels(key: &Key, le: Option<&str>) -> String {
    let mut pairs: Vec<String> = key
        .labels()
        .map(|l| format!("{}=\"{}\"", l.key(), escape(l.value(), true)))
        .collect();
    if let Some(le) = le {
        pairs.push(format!("le=\"{le}\""));
    }
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

/// A sample value as Prometheus writes it (`+Inf`, `-Inf`, `NaN`, else the shortest form).
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        value.to_string()
    }
}

/// Escapes a label value (backslash, double quote, newline) or a help text (backslash, newline).
fn escape(text: &str, quote: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out += "\\\\",
            '\n' => out += "\\n",
            '"' if quote => out += "\\\"",
            c => out.push(c),
        }
    }
    out
}

impl Recorder for TextRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(key, unit, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(
            self.store()
                .counters
                .entry(key.clone())
                .or_default()
                .clone(),
        )
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.store().gauges.entry(key.clone()).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(
            self.store()
                .histograms
                .entry(key.clone())
                .or_default()
                .clone(),
        )
    }
}
