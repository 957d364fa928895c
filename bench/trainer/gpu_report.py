"""The GPU section of bench/results/trainer.md, from the "gpu" object bench/trainer/gpu.py writes."""
from __future__ import annotations

# our systems (bench/trainer/gpu.py SYSTEMS) and the key of their ratios against the baselines in a method's row
OURS = {"hanzo-ml": "ratios", "hanzo-ml-compile": "ratios_compiled", "hanzo-ml-fp32-weights": "ratios_fp32_weights"}


def gpu_table(gpu: dict) -> list[str]:
    """The header (device, versions, reference check) and one row per (method, system), ours first."""
    lines = gpu_header(gpu) + [
        "| method | system | tokens/s | MFU | peak memory GiB | first step s | vs plain: tokens/s | memory | "
        "vs rival: tokens/s | memory |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in gpu["results"]:
        lines += gpu_method_rows(r, gpu.get("systems", {}))
    notes = [f"- {gpu['systems'].get(s, s)}, {r['method']}: {r[s.replace('-', '_')]['note']}"
             for r in gpu["results"] for s in gpu.get("systems", {})
             if r.get(s.replace("-", "_"), {}).get("note")]
    return lines + ([""] + notes if notes else [])


def gpu_header(gpu: dict) -> list[str]:
    versions = ", ".join(f"{k} {v}" for k, v in (gpu.get("versions") or {}).items() if v)
    device = gpu["device"] + (f" (driver {gpu['driver']}, CUDA {gpu['cuda']})" if gpu.get("driver") else "")
    lines = [f"{device}; {versions}; source commit {gpu.get('commit') or 'unknown'}; a "
             f"{gpu['parameters'] / 1e9:.2f}B-parameter Llama-architecture model made from a config; {gpu['steps']} "
             f"steps ({gpu['skip']} warm-up steps left out), {gpu['rows']} packed rows of {gpu['seq_len']} tokens per "
             "step for ours; the baselines take as many examples per step as hold the same tokens (plain: padded "
             "batches; rival: the examples flattened into one row); MFU against "
             f"{gpu['peak_tflops']:g} TFLOP/s; measured {gpu['measured_at']}. Ratios are ours / theirs: tokens/s above "
             "1 and memory below 1 favour ours. first step s: the wall time of the first step (compilation shows "
             "there).", ""]
    if gpu.get("source"):
        lines[-1:-1] = ["", f"Source: {gpu['source']}."]
    check = gpu.get("reference_check")
    if check and not check["ok"]:
        lines += [f"**Reference check FAILED** (`bench/trainer/gpu_check.py`): {summary(check['error'])}", ""]
    elif check:
        lines += ["Reference check (`bench/trainer/gpu_check.py`): passed.", ""]
    return lines


def gpu_method_rows(r: dict, systems: dict) -> list[str]:
    def cell(value, fmt, suffix=""):
        return format(value, fmt) + suffix if value is not None else ""

    def ratio(against: str, key: str, bold: bool) -> str:
        value = r.get(ratios_key, {}).get(against, {}).get(key)
        text = cell(value, ".2f", "x")
        return f"**{text}**" if bold and text else text
    lines = []
    for system, name in systems.items():
        m = r.get(system.replace("-", "_"))
        if m is None:
            continue
        first = r["method"] if not lines else ""
        if system == "rival" and m.get("attention", "flex_attention") != "flex_attention":  # the row says so
            name += f" (ran: {m['attention'].upper()}{'' if m.get('liger') else ', no Liger'})"
        if "error" in m:
            lines.append(f"| {first} | {name} | failed: {summary(m['error'])} | | | | | | | |")
            continue
        ratios_key = OURS.get(system)
        ratios = (f"{ratio('baseline', 'tokens_per_second', True)} | {ratio('baseline', 'peak_memory', False)} | "
                  f"{ratio('rival', 'tokens_per_second', True)} | {ratio('rival', 'peak_memory', False)}"
                  if ratios_key else " | | | ")
        mfu = m.get("mfu")
        lines.append(f"| {first} | {name} | {m['tokens_per_second']:,.0f} | {cell(mfu and 100 * mfu, '.1f', '%')} | "
                     f"{cell(m.get('peak_memory_gib'), '.2f')} | {cell(m.get('first_step_seconds'), '.1f')} | "
                     f"{ratios} |")
    return lines


def summary(error: str) -> str:
    """An error's reason (its first line) and its message (the last line of the log: a traceback's exception)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    text = lines[0] if len(lines) < 2 else f"{lines[0]}: {lines[-1]}"
    return text.replace("|", "\\|")
