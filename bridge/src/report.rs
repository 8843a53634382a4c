//! `trestle report DIR`: what a campaign found and why it is real, as Markdown and
//! as one self-contained HTML page (the coverage plot is inline SVG), or as JSON.

use crate::campaign::Campaign;
use crate::lift::{AlarmEntry, AlarmList, LiftStats, Provenance};
use anyhow::{Context as _, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use trestle_exec::files;
use trestle_exec::systest::{Content, JsonTest};

/// One sample of a campaign's timeline.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sample {
    /// Seconds since the start.
    pub seconds: f64,
    /// Edges covered at system level.
    pub edges: u64,
    /// Alarms so far.
    pub alarms: u64,
}

/// Read `timeline.csv`.
pub fn read_timeline(dir: &Path) -> Result<Vec<Sample>> {
    let path = dir.join(files::TIMELINE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(s), Some(e), Some(a)) = (col("seconds"), col("edges"), col("alarms")) else {
        anyhow::bail!(
            "{}: the header has no seconds/edges/alarms columns",
            path.display()
        );
    };
    let rows: Vec<&str> = lines.collect();
    let mut out = Vec::new();
    for (i, line) in rows.iter().enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        match (
            f.get(s).map(|x| x.parse()),
            f.get(e).map(|x| x.parse()),
            f.get(a).map(|x| x.parse()),
        ) {
            (Some(Ok(seconds)), Some(Ok(edges)), Some(Ok(alarms))) => out.push(Sample {
                seconds,
                edges,
                alarms,
            }),
            // A kill may cut the last line short.
            _ if i + 1 == rows.len() => {}
            _ => anyhow::bail!("{} line {}: not a sample: {line:?}", path.display(), i + 2),
        }
    }
    Ok(out)
}

/// Everything the report says, in one value (the `--json` output).
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The campaign directory.
    pub dir: PathBuf,
    /// Its state.
    pub campaign: Campaign,
    /// Coverage over time.
    pub timeline: Vec<Sample>,
    /// The baseline's coverage over time.
    pub baseline: Option<Vec<Sample>>,
    /// The baseline campaign.
    pub baseline_campaign: Option<Campaign>,
    /// The baseline's alarms.
    pub baseline_alarms: Vec<AlarmEntry>,
    /// Lifting figures.
    pub lifting: LiftStats,
    /// Alarms.
    pub alarms: Vec<AlarmEntry>,
    /// Reduced reproducer and provenance of each alarm.
    pub details: Vec<AlarmDetail>,
    /// The nodes of a campaign across machines (none for one machine), the main
    /// node first: name, cores, executions, finds.
    pub nodes: Vec<crate::cluster::hub::NodeRecord>,
}

/// An alarm's reproducer and provenance.
#[derive(Debug, serde::Serialize)]
pub struct AlarmDetail {
    /// The alarm's id.
    pub id: String,
    /// The reduced system test.
    pub reduced: JsonTest,
    /// Where it came from.
    pub provenance: Provenance,
}

/// Gather a report.
pub fn gather(dir: &Path, baseline: Option<&Path>) -> Result<Report> {
    let cpath = dir.join(files::CAMPAIGN);
    if !cpath.exists() {
        anyhow::bail!(
            "{} is not a campaign directory (no {})",
            dir.display(),
            files::CAMPAIGN
        );
    }
    let mut campaign: Campaign = files::read(&cpath)?;
    campaign.upgrade();
    let timeline = read_timeline(dir)?;
    let base_dir = baseline
        .map(Path::to_owned)
        .or_else(|| Some(dir.join("baseline")).filter(|d| d.join(files::TIMELINE).exists()));
    let baseline = base_dir.as_deref().map(read_timeline).transpose()?;
    let baseline_campaign = base_dir
        .as_deref()
        .map(|d| files::read::<Campaign>(&d.join(files::CAMPAIGN)))
        .transpose()?;
    let baseline_alarms = match &base_dir {
        Some(d) => {
            files::read_if_present::<AlarmList>(&d.join(files::ALARMS))?
                .unwrap_or_default()
                .alarms
        }
        None => Vec::new(),
    };
    let lifting: LiftStats = files::read(&dir.join(files::LIFT))?;
    let alarms = files::read::<AlarmList>(&dir.join(files::ALARMS))?.alarms;
    let details = alarm_details(dir, &alarms)?;
    let nodes = campaign.nodes.clone();
    Ok(Report {
        dir: dir.to_owned(),
        campaign,
        timeline,
        baseline,
        baseline_campaign,
        baseline_alarms,
        lifting,
        alarms,
        details,
        nodes,
    })
}

/// The reproducer and provenance of each of `alarms`, from their folders under `dir`.
pub fn alarm_details(dir: &Path, alarms: &[AlarmEntry]) -> Result<Vec<AlarmDetail>> {
    let mut details = Vec::new();
    for a in alarms {
        let ad = dir.join(files::ALARMS_DIR).join(&a.id);
        let reduced = trestle_exec::systest::to_json(&trestle_exec::systest::load_test(
            &ad.join(files::REDUCED),
        )?);
        let provenance: Provenance = files::read(&ad.join(files::PROVENANCE))?;
        details.push(AlarmDetail {
            id: a.id.clone(),
            reduced,
            provenance,
        });
    }
    Ok(details)
}

/// The coverage plot: edges over time, the campaign and (if given) the baseline, as
/// an SVG line chart (plotters' SVG backend; its text is SVG text, laid out by the
/// browser, so no font is needed here).
pub fn svg_plot(main: &[Sample], baseline: Option<&[Sample]>, main_label: &str) -> Result<String> {
    use plotters::prelude::*;
    // plotters draws text at 1/1.24 of the size asked: 12 px, as the page's.
    const FONT: f64 = 15.0;
    let all = main.iter().chain(baseline.unwrap_or_default());
    let max_x = all.clone().map(|s| s.seconds).fold(1.0f64, f64::max);
    let max_y = all.map(|s| s.edges as f64).fold(1.0f64, f64::max) * 1.1;
    let mut series = vec![(main, RGBColor(0xc0, 0x39, 0x2b), main_label)];
    if let Some(bl) = baseline {
        series.push((bl, RGBColor(0x2c, 0x6f, 0xbb), "system only"));
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 360)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(20)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max_x, 0.0..max_y)?;
        chart
            .configure_mesh()
            .x_labels(6)
            .y_labels(6)
            .x_label_formatter(&|v| format!("{v:.0}s"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .x_desc("time")
            .y_desc("edges covered (system level)")
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(0xdd, 0xdd, 0xdd))
            .label_style(("sans-serif", FONT))
            .axis_desc_style(("sans-serif", FONT))
            .draw()?;
        for (samples, color, label) in series {
            let points = samples.iter().map(|p| (p.seconds, p.edges as f64));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 2), (x + 24, y + 2)], color.filled())
                });
        }
        // In the lower right, where rising curves are not.
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(RGBColor(0xcc, 0xcc, 0xcc))
            .label_font(("sans-serif", FONT))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

fn show_content(c: &Content) -> String {
    match c {
        Content::Text(t) => format!("{:?}", t.chars().take(300).collect::<String>()),
        Content::Base64 { base64 } => {
            format!("{} bytes of binary data (base64)", base64.len() / 4 * 3)
        }
    }
}

fn show_test(t: &JsonTest) -> String {
    let mut s = format!(
        "args: {}",
        t.args
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ")
    );
    match &t.stdin {
        Some(Content::Text(text)) if text.is_empty() => {}
        Some(c) => {
            let _ = write!(s, "\nstdin: {}", show_content(c));
        }
        None => {}
    }
    for (name, c) in &t.files {
        let _ = write!(s, "\nfile {name}: {}", show_content(c));
    }
    s
}

fn provenance_lines(p: &Provenance) -> Vec<String> {
    let reduction = |r: &crate::validate::reduce::ReduceStats| {
        format!("reduced test: {} → {} bytes", r.size_before, r.size_after)
    };
    match p {
        Provenance::System(f) => vec![
            f.triaged_from.as_ref().map_or_else(
                || "found by system-level fuzzing".into(),
                |by| format!("triaged from {by}"),
            ),
            format!("system test {}", f.system_test.name),
            reduction(&f.reduced_test.reduction),
        ],
        Provenance::Lifted(f) => vec![
            format!("seed system test `{}`", f.seed_test),
            format!(
                "carved invocation: `{}` (call #{}{})",
                f.carved_invocation.function,
                f.carved_invocation.call_index,
                f.carved_invocation
                    .source
                    .as_deref()
                    .map(|s| format!(", {s}"))
                    .unwrap_or_default()
            ),
            format!(
                "unit input: {} ({})",
                f.unit_input.values.join(", "),
                f.unit_input.signature.as_deref().unwrap_or("no crash")
            ),
            format!(
                "lifted test: {}",
                f.lifted_test
                    .substitutions
                    .iter()
                    .map(|x| format!("{} {:?} → {:?}", x.input, x.old, x.new))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            reduction(&f.reduced_test.reduction),
        ],
    }
}

/// The report as Markdown.
pub fn markdown(r: &Report) -> String {
    let c = &r.campaign;
    let mode = if c.settings.system_only {
        "system-only"
    } else {
        "bridge"
    };
    let mut s = format!(
        "# trestle campaign report\n\n`{}` ({mode}), program `{}`, seeds `{}`.\n\n",
        r.dir.display(),
        c.settings.program.display(),
        c.settings.seeds.display()
    );
    let last = r.timeline.last().map_or(0, |x| x.edges);
    s += "| | this campaign | system only |\n|---|---|---|\n";
    let base_last = r.baseline.as_ref().and_then(|b| b.last()).map(|x| x.edges);
    let _ = writeln!(
        s,
        "| time | {:.0}s of {:.0}s | {} |",
        c.elapsed,
        c.settings.budget.as_secs_f64(),
        r.baseline
            .as_ref()
            .and_then(|b| b.last())
            .map_or("—".into(), |x| format!("{:.0}s", x.seconds))
    );
    let _ = writeln!(
        s,
        "| edges covered | {last} | {} |",
        base_last.map_or("—".into(), |v| v.to_string())
    );
    if let Some(bl) = base_last.filter(|v| *v > 0) {
        let _ = writeln!(s, "| ratio | {:.2}x | 1.00x |", last as f64 / bl as f64);
    }
    let bc = r.baseline_campaign.as_ref();
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "—".into());
    let _ = writeln!(
        s,
        "| system executions | {} | {} |",
        c.system_executions,
        or_dash(bc.map(|b| b.system_executions.to_string()))
    );
    let _ = writeln!(
        s,
        "| unit executions | {} | {} |",
        c.unit_executions,
        or_dash(bc.map(|b| b.unit_executions.to_string()))
    );
    let build = |c: &Campaign| {
        c.system_build
            .split(':')
            .next()
            .filter(|k| !k.is_empty())
            .unwrap_or("—")
            .to_owned()
    };
    let _ = writeln!(
        s,
        "| system fuzzing ran | {} | {} |",
        build(c),
        or_dash(bc.map(build))
    );
    let disk = |c: &Campaign| {
        let d = &c.disk;
        let evicted = if d.corpora_evicted + d.batches_evicted.len() > 0 {
            format!(
                " ({} unit corpora, {} unit batch(es) evicted: {})",
                d.corpora_evicted,
                d.batches_evicted.len(),
                crate::campaign::disk::human(d.bytes_evicted)
            )
        } else {
            String::new()
        };
        format!(
            "{}, peak {}, of {}{evicted}",
            crate::campaign::disk::human(d.bytes),
            crate::campaign::disk::human(d.peak),
            crate::campaign::disk::human(c.settings.max_disk)
        )
    };
    let _ = writeln!(s, "| disk | {} | {} |", disk(c), or_dash(bc.map(disk)));
    let names = |a: &[AlarmEntry]| {
        a.iter()
            .map(|x| format!("`{}`", x.function))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        s,
        "| alarms | {} ({}) | {} |",
        r.alarms.len(),
        names(&r.alarms),
        or_dash(bc.map(|_| format!(
            "{} ({})",
            r.baseline_alarms.len(),
            names(&r.baseline_alarms)
        )))
    );
    node_section(&mut s, r);
    alarm_sections(&mut s, r);
    lifting_sections(&mut s, r);
    roadblock_section(&mut s, c, &r.alarms);
    unit_sections(&mut s, c);
    s
}

/// The system fuzzer's roadblocks, the units fuzzed at them and what came of it.
fn roadblock_section(s: &mut String, c: &Campaign, alarms: &[AlarmEntry]) {
    if c.settings.system_only {
        return;
    }
    let r = &c.roadblocks;
    *s += "## Roadblocks

";
    let _ = writeln!(
        s,
        "Branches of the program's own code the system fuzzer reached with a direction never taken: {} at the last look (`roadblocks.json`); {} unit(s) fuzzed at one, {} flipped in the unit, {} solved at system level. The schedule ended giving unit rounds {:.0}% of the time, by what each side found lately (`schedule` in `campaign.json`).\n",
        r.seen,
        r.attempts.len(),
        r.attempts.iter().filter(|a| a.flipped_at.is_some()).count(),
        r.solved(),
        100.0 * c.schedule.unit_share()
    );
    let from_slices = alarms.iter().filter(|a| a.roadblock.is_some()).count();
    let descended = alarms.iter().filter(|a| a.descends_from.is_some()).count();
    let _ = writeln!(
        s,
        "Of the {} alarm(s), {from_slices} came from a roadblock slice and {descended} from the system fuzzer on a test that descends from a lifted one (`descends_from` in `alarms.json`). Of the system fuzzer's {} queue entries and findings, {} descend from a lifted test (`system/lineage.jsonl`).\n",
        alarms.len(),
        c.lineage.entries,
        c.lineage.from_lifted
    );
    let probes: usize = r.probed.values().map(|t| t.probes).sum();
    if probes > 0 {
        let passed: usize = r.probed.values().map(|t| t.probes - t.worth).sum();
        let unreached: usize = r.probed.values().map(|t| t.unreached).sum();
        let _ = writeln!(
            s,
            "Before a slice, {probes} unit(s) were probed at a roadblock, {} roadblock(s) in all: {passed} passed over ({unreached} did not reach the branch, the others' parameters did not change what it compares; `roadblocks.probed` in `campaign.json`, the newest probes in `roadblocks.probes`).\n",
            r.probed.len()
        );
    }
    if r.attempts.is_empty() {
        return;
    }
    *s += "| at | roadblock | function | blocks behind | unit | flipped in the unit | solved | alarms | effective lifted tests |\n|---|---|---|---|---|---|---|---|---|\n";
    let secs = |t: Option<f64>| t.map_or("—".to_owned(), |t| format!("{t:.0}s"));
    for a in &r.attempts {
        let f = c.fuzzed.get(a.fuzzed);
        let _ = writeln!(
            s,
            "| {:.0}s | `{}` | `{}` | {} | `{}` | {} | {} | {} | {} |",
            a.at,
            a.location,
            a.function,
            a.behind,
            f.map_or("?", |f| f.function.as_str()),
            secs(a.flipped_at),
            secs(a.solved_at),
            f.map_or(0, |f| f.new_alarms),
            f.map_or(0, |f| f.effective)
        );
    }
    *s += "\n";
}

/// The machines of a campaign across machines, with what each did.
fn node_section(s: &mut String, r: &Report) {
    if r.nodes.is_empty() {
        return;
    }
    *s += "\n## Nodes\n\n| node | cores | executions | finds |\n|---|---|---|---|\n";
    for n in &r.nodes {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} |",
            n.name, n.cores, n.execs, n.finds
        );
    }
}

/// Each alarm: its signature, reproducer and provenance.
fn alarm_sections(s: &mut String, r: &Report) {
    *s += "\n## Coverage over time\n\nSee `report.html` for the plot (SVG); the samples are in `timeline.csv`.\n\n";
    *s += "## Alarms\n\n";
    if r.alarms.is_empty() {
        *s += "None.\n\n";
    }
    for (a, d) in r.alarms.iter().zip(&r.details) {
        let _ = writeln!(s, "### `{}`: {}\n", a.id, a.signature);
        let on = a
            .found_on
            .as_deref()
            .map(|n| format!(" on worker `{n}`"))
            .unwrap_or_default();
        let from = match (a.source.as_str(), &a.roadblock, &a.descends_from) {
            ("system", _, Some(d)) => {
                let at = d
                    .origin
                    .roadblock
                    .as_ref()
                    .map(|r| format!(" at `{r}`"))
                    .unwrap_or_default();
                format!("system-level fuzzing, {} mutation(s) on from a test lifted from a unit of `{}`{at}", d.generations, d.origin.unit)
            }
            ("system", _, None) => "system-level fuzzing".to_owned(),
            (_, Some(r), _) => format!("a lifted unit finding (the slice at the roadblock `{r}`)"),
            _ => "a lifted unit finding".to_owned(),
        };
        let _ = writeln!(
            s,
            "From {from}{on} ({} candidate(s)); reproduce with `alarms/{}/reproduce.sh`.\n",
            a.candidates, a.id
        );
        if a.build_dependent() {
            let _ = writeln!(s, "**Build-dependent**: it does not crash every build the same way (often undefined behaviour); check it on the build you ship.\n");
        }
        for b in &a.builds {
            let verdict = if b.reproduces {
                "reproduces"
            } else {
                "does not reproduce"
            };
            let _ = writeln!(
                s,
                "- {} build `{}`: {verdict} ({})",
                b.role,
                b.program.display(),
                b.ended
            );
        }
        if !a.builds.is_empty() {
            *s += "\n";
        }
        let _ = writeln!(
            s,
            "Reduced reproducer ({} bytes, lifted {}):\n\n```\n{}\n```\n",
            a.size_reduced,
            a.size_lifted,
            show_test(&d.reduced)
        );
        *s += "Provenance:\n\n";
        for (i, line) in provenance_lines(&d.provenance).iter().enumerate() {
            let _ = writeln!(s, "{}. {line}", i + 1);
        }
        *s += "\n";
    }
}

/// Figures of carving, mapping and lifting.
fn lifting_sections(s: &mut String, r: &Report) {
    let c = &r.campaign;
    let l = &r.lifting;
    *s += "## Carving, mapping, lifting\n\n";
    let _ = writeln!(
        s,
        "- system tests recorded: {}; units carved: {}, with parameters: {}",
        c.recorded.len(),
        c.units_carved,
        c.units_parameterized
    );
    let _ = writeln!(
        s,
        "- units fuzzed: {}; unit crashes: {}; queue inputs lifted: {}",
        c.fuzzed.len(),
        l.unit_crashes,
        l.unit_queue
    );
    let _ = writeln!(
        s,
        "- lifted system tests: {}; effective: {}; true-alarm tests: {}; other crashes: {}; false positives suppressed: {}; productive share {:.1}%",
        l.lifted_tests,
        l.effective,
        l.true_alarm_tests,
        l.other_crash_tests,
        l.false_positives,
        100.0 * l.productive_share()
    );
    let _ = writeln!(
        s,
        "- system crashes from system-level fuzzing validated: {}\n",
        c.system_crashes
    );
}

/// Which units were fuzzed, why, and which could not be.
fn unit_sections(s: &mut String, c: &Campaign) {
    *s += "## Most productive units\n\n| function | unit executions | unit crashes | alarms | effective lifted tests |\n|---|---|---|---|---|\n";
    let mut units: Vec<_> = c.fuzzed.iter().collect();
    units.sort_by_key(|f| std::cmp::Reverse((f.new_alarms, f.effective, f.crashes)));
    for f in units.iter().take(10) {
        let _ = writeln!(
            s,
            "| `{}` | {} | {} | {} | {} |",
            f.function, f.executions, f.crashes, f.new_alarms, f.effective
        );
    }
    *s += "\n## Why each unit was fuzzed\n\n| # | function | chosen because |\n|---|---|---|\n";
    for (i, f) in c.fuzzed.iter().enumerate() {
        let why = if f.reason.is_empty() {
            "(not recorded by this version)"
        } else {
            &f.reason
        };
        let _ = writeln!(
            s,
            "| {} | `{}` | {} |",
            i + 1,
            f.function,
            why.replace('|', "\\|")
        );
    }
    // Units the dry run refused, by reason (the reason is the error's last part).
    let mut skipped: BTreeMap<&str, usize> = BTreeMap::new();
    for e in c.fuzzed.iter().filter_map(|f| f.error.as_deref()) {
        *skipped
            .entry(e.rsplit(": ").next().unwrap_or(e))
            .or_default() += 1;
    }
    if !skipped.is_empty() {
        *s += "\n## Units skipped\n\n| reason | units |\n|---|---|\n";
        for (why, n) in &skipped {
            let _ = writeln!(s, "| {} | {n} |", why.replace('|', "\\|"));
        }
    }
    let errs: Vec<_> = c
        .fuzzed
        .iter()
        .filter_map(|f| f.error.as_ref().map(|e| (f, e)))
        .collect();
    if !errs.is_empty() {
        *s += "\nUnits that could not be fuzzed or lifted:\n\n";
        for (f, e) in errs {
            let _ = writeln!(s, "- `{}`: {e}", f.function);
        }
    }
}

/// The report as one HTML page.
pub fn html(r: &Report) -> Result<String> {
    let plot = svg_plot(
        &r.timeline,
        r.baseline.as_deref(),
        if r.campaign.settings.system_only {
            "this campaign (system only)"
        } else {
            "bridge (trestle run)"
        },
    )?;
    Ok(page(&markdown(r), &plot))
}

/// The report's Markdown `md` as a page, with `plot` under its "Coverage over time"
/// heading. Whatever looks like HTML in the Markdown (a test's input, a crash's
/// stack) is shown as text, never taken as markup.
fn page(md: &str, plot: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let md: String = md
        .lines()
        .filter(|l| !l.starts_with("See `report.html`"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut heading: Option<String> = None;
    let events = Parser::new_ext(&md, Options::ENABLE_TABLES).flat_map(|ev| {
        let mut out = vec![];
        match ev {
            Event::Html(h) | Event::InlineHtml(h) => out.push(Event::Text(h)),
            Event::Start(Tag::Heading { .. }) => {
                heading = Some(String::new());
                out.push(ev);
            }
            Event::End(TagEnd::Heading(_)) => {
                let under = heading.take().is_some_and(|h| h == "Coverage over time");
                out.push(ev);
                if under {
                    out.push(Event::Html(plot.to_owned().into()));
                }
            }
            Event::Text(ref t) | Event::Code(ref t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(t);
                }
                out.push(ev);
            }
            _ => out.push(ev),
        }
        out
    });
    let mut body = String::new();
    pulldown_cmark::html::push_html(&mut body, events);
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>trestle report</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 960px; margin: 2em auto; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ border: 1px solid #ccc; padding: 4px 10px; }}\n\
         pre {{ background: #f4f4f4; padding: 8px; overflow-x: auto; }} code {{ background: #f4f4f4; }}\n\
         </style></head><body>\n{body}</body></html>\n"
    )
}

/// Write the report's pages into the campaign directory `dir`: `report.md` and
/// `report.html`; their paths.
pub fn write_pages(dir: &Path, r: &Report) -> Result<(PathBuf, PathBuf)> {
    let md = dir.join("report.md");
    let page = dir.join("report.html");
    std::fs::write(&md, markdown(r)).with_context(|| format!("cannot write {}", md.display()))?;
    std::fs::write(&page, html(r)?).with_context(|| format!("cannot write {}", page.display()))?;
    Ok((md, page))
}

#[cfg(test)]
mod tests {
    use super::{page, svg_plot, Sample};

    fn sample(seconds: f64, edges: u64) -> Sample {
        Sample {
            seconds,
            edges,
            alarms: 0,
        }
    }

    #[test]
    fn the_plot_draws_each_series_through_its_samples_with_labelled_axes() {
        let main: Vec<Sample> = (0..7)
            .map(|i| sample(15.0 * i as f64, 10 + 9 * i))
            .collect();
        let base = [sample(0.0, 10), sample(45.0, 20), sample(90.0, 31)];
        let svg = svg_plot(&main, Some(&base), "bridge (trestle run)").unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        // The series are the wide lines, in the order drawn; axes and ticks are thin.
        let curves: Vec<Vec<(f64, f64)>> = svg
            .lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
            .map(|l| {
                let points = l
                    .split("points=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                points
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect();
        assert_eq!(curves.len(), 2, "{svg}");
        assert_eq!(curves[0].len(), main.len(), "{svg}");
        assert_eq!(curves[1].len(), base.len(), "{svg}");
        // Later samples lie to the right, more edges higher up (SVG's y grows down);
        // both start at the same point and the campaign ends above the baseline.
        for c in &curves {
            assert!(
                c.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 > w[1].1),
                "{c:?}"
            );
        }
        assert_eq!(curves[0][0], curves[1][0]);
        assert!(curves[0].last().unwrap().1 < curves[1].last().unwrap().1);
        for text in [
            "time",
            "edges covered (system level)",
            "0s",
            "80s",
            "0",
            "bridge (trestle run)",
            "system only",
        ] {
            assert!(
                svg.contains(&format!(">\n{text}\n</text>")),
                "{text}: {svg}"
            );
        }
        // No samples yet, or one: still a plot.
        for few in [&[][..], &main[..1]] {
            let svg = svg_plot(few, None, "bridge (trestle run)").unwrap();
            assert!(svg.contains("bridge (trestle run)"), "{svg}");
        }
    }

    #[test]
    fn the_page_renders_tables_lists_and_code_and_shows_markup_in_inputs_as_text() {
        let md = "# Campaign\n\nSee `report.html` for the plot.\n\n## Coverage over time\n\n\
                  | program | edges |\n|---|---|\n| `sed` | **12** |\n\n## Alarms\n\n\
                  - SIGSEGV in `f < g`\n- stdin <script>alert(1)</script>\n\n\
                  ```\n<b>raw</b>\n```\n";
        let html = page(md, "<svg id=\"plot\"></svg>");
        assert!(!html.contains("See <code>report.html</code>"), "{html}");
        let plot = html.find("<svg id=\"plot\">").expect("the plot");
        let heading = html
            .find("<h2>Coverage over time</h2>")
            .expect("the heading");
        let table = html.find("<table>").expect("a table");
        assert!(heading < plot && plot < table, "{html}");
        assert!(html.contains("<th>program</th>"), "{html}");
        assert!(html.contains("<td><code>sed</code></td>"), "{html}");
        assert!(html.contains("<strong>12</strong>"), "{html}");
        assert!(
            html.contains("<ul>") && html.contains("<li>SIGSEGV in <code>f &lt; g</code></li>"),
            "{html}"
        );
        assert!(
            !html.contains("<script>") && html.contains("&lt;script&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;b&gt;raw&lt;/b&gt;"), "{html}");
    }
}
