"""v100 submit | status | cancel: see `v100 --help` and README.md, "API and command-line client"."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import httpx

# Exit codes: what a CI step tells apart.
OK, RUN_FAILED, REFUSED, FATAL_FLAG, REGRESSED, TIMED_OUT = 0, 1, 2, 3, 4, 5
# Compared with a baseline unless --metric says otherwise: throughput and the two latencies users feel.
DEFAULT_METRICS = ("aggregate_tok_s", "ttft_ms_p50", "tpot_ms_p50")


class ClientError(Exception):
    """A refusal or failure to report, with the exit code it means."""

    def __init__(self, message: str, code: int = REFUSED):
        super().__init__(message)
        self.code = code


class Api:
    def __init__(self, url: str, token: str, timeout: float = 30.0):
        if not url:
            raise ClientError("no server: pass --url or set V100_URL")
        if not token:
            raise ClientError("no API token: pass --token or set V100_TOKEN (make one on the API tokens page)")
        self.http = httpx.Client(base_url=url.rstrip("/") + "/api/v1/", timeout=timeout,
                                 headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})

    def call(self, method: str, path: str, **kwargs) -> dict:
        for attempt in range(5):
            try:
                r = self.http.request(method, path, **kwargs)
            except httpx.HTTPError as e:
                raise ClientError(f"cannot reach the server: {e}", RUN_FAILED) from None
            if r.status_code == 429 and attempt < 4:  # rate limited: wait as told, then again
                time.sleep(min(60.0, float(r.headers.get("Retry-After", "5"))))
                continue
            break
        try:
            body = r.json()
        except ValueError:
            raise ClientError(f"{method} {path}: HTTP {r.status_code}, not JSON: {r.text[:300]}") from None
        if r.status_code >= 400:
            raise ClientError(f"{method} {path}: HTTP {r.status_code}: {describe_error(body)}")
        return body


def describe_error(body) -> str:
    if not isinstance(body, dict):
        return str(body)[:500]
    lines = [str(body.get("error", body))]
    for field, messages in (body.get("errors") or {}).items():
        lines.append(f"  {field}: {' '.join(map(str, messages))}")
    return "\n".join(lines)


def load_workload(path: str) -> dict:
    """A run's fields from a JSON or YAML file (the run form's field names)."""
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ClientError("reading YAML needs PyYAML: pip install 'v100client[yaml]', or use JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ClientError(f"{path} is not valid YAML: {e}") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ClientError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ClientError(f"{path} must hold one object of run fields (title, endpoints, prompt_tokens, …)")
    return data


def progress_line(run: dict) -> str:
    p = run["progress"]
    note = f" · {p['note']}" if p.get("note") else ""
    return f"{run['public_id']} {run['status']} {p['percent']}% ({p['done']}/{p['total']}){note}"


def wait(api: Api, run: dict, *, poll_s: float, timeout_s: float, out=sys.stderr) -> dict:
    deadline = time.monotonic() + timeout_s
    tty, last = out.isatty(), ""
    while True:
        line = progress_line(run)
        if line != last:
            out.write(("\r\x1b[K" + line) if tty else line + "\n")
            out.flush()
            last = line
        if run["finished"]:
            break
        if time.monotonic() > deadline:
            if tty:
                out.write("\n")
            raise ClientError(f"run {run['public_id']} not finished after {timeout_s:.0f} s: {run['permalink']}",
                              TIMED_OUT)
        time.sleep(poll_s)
        run = api.call("GET", f"runs/{run['public_id']}/")
    if tty:
        out.write("\n")
    return run


def _number(value, unit: str) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} {unit}".strip() if abs(value) < 1e5 else f"{value:.3g} {unit}".strip()


def summary(run: dict, results: dict) -> str:
    lines = [f"{run['title'] or 'run'} {run['public_id']}: {run['status']}", f"  {run['permalink']}"]
    if run.get("error"):
        lines.append(f"  error: {run['error']}")
    for level in results.get("headlines", []):
        f = level["figures"]
        shown = ", ".join(f"{name} {_number(f[name]['value'], f[name]['unit'])}" for name in DEFAULT_METRICS
                          if name in f)
        flags = f"  flags: {', '.join(x['code'] for x in level['flags'])}" if level["flags"] else ""
        lines.append(f"  {level['endpoint']} @ {level['load']}: {level['completed']} ok, {level['failed']} failed; "
                     f"{shown}{flags}")
    return "\n".join(lines)


def fatal_flags(results: dict, fatal: list[str]) -> list[str]:
    found = []
    for level in results.get("headlines", []):
        for flag in level["flags"]:
            if flag["code"] in fatal:
                found.append(f"{level['endpoint']} @ {level['load']}: {flag['code']}: {flag['reason']}")
    return found


def baseline_results(api: Api, baseline: str) -> dict:
    """A baseline's results (its per-trial "headlines" and, where the server gave them, its
    "across_trials" estimates): from a file this client wrote (--output), a results document,
    or a run's public id on the server."""
    path = Path(baseline)
    if path.exists():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise ClientError(f"baseline {baseline} is not valid JSON: {e}") from None
        doc = doc.get("results", doc) if isinstance(doc, dict) else {}
        if not isinstance(doc.get("headlines"), list):
            raise ClientError(f"baseline {baseline} has no headlines: write it with `v100 submit --output`")
        return doc
    return api.call("GET", f"runs/{baseline}/results/")


def _levels(results: dict, metrics: list[str]) -> dict:
    """Per (endpoint, load): per figure its mean over the trials, unit, direction and 95 %
    interval: across the trials where there are several (the server's estimate), else over the
    one trial's requests (a percentile); None where the results give none."""
    out: dict = {}
    for level in results.get("headlines") or []:
        for name in metrics:
            figure = (level.get("figures") or {}).get(name)
            if figure and figure.get("value") is not None:
                entry = out.setdefault((level["endpoint"], level["load"]), {}).setdefault(
                    name, {"values": [], "unit": figure.get("unit", ""), "better": figure.get("better"),
                           "intervals": []})
                entry["values"].append(figure["value"])
                entry["intervals"].append(figure.get("interval"))
    across = {(e["endpoint"], e["load"], name): f for e in results.get("across_trials") or []
              for name, f in (e.get("figures") or {}).items() if f}
    for key, figures in out.items():
        for name, entry in figures.items():
            entry["mean"] = sum(entry["values"]) / len(entry["values"])
            trials = across.get((*key, name)) or {}
            if len(entry["values"]) == 1:
                entry["interval"] = entry["intervals"][0]
            elif trials.get("low") is not None and trials.get("high") is not None:
                entry["interval"] = [trials["low"], trials["high"]]
            else:
                entry["interval"] = None
    return out


def regressions(current: dict, baseline: dict, metrics: list[str], max_pct: float) -> tuple[list, list, list]:
    """Levels matched by endpoint and load; a figure regressed when its mean is worse than the
    baseline's by more than `max_pct` percent, in the direction the metric is better, and the
    two 95 % intervals (across trials, else over a percentile's requests) do not overlap: a
    change within the noise the data carry is said, never failed on. Returns (regressions,
    comparisons made, changes within the noise), each a line of text."""
    now_levels, before = _levels(current, metrics), _levels(baseline, metrics)
    found, compared, noise = [], [], []
    for key, figures in now_levels.items():
        for name, now in figures.items():
            then = before.get(key, {}).get(name)
            if then is None or not then["mean"]:
                continue
            change = 100.0 * (now["mean"] - then["mean"]) / abs(then["mean"])
            worse = -change if now["better"] == "higher" else change
            line = (f"{key[0]} @ {key[1]}: {name} {_number(then['mean'], now['unit'])} → "
                    f"{_number(now['mean'], now['unit'])} ({change:+.1f} %)")
            compared.append(line)
            a, b = now["interval"], then["interval"]
            if worse > max_pct and a and b and a[0] <= b[1] and b[0] <= a[1]:
                noise.append(f"{line}: within the noise, the 95 % intervals overlap "
                             f"({_number(b[0], '')}–{_number(b[1], now['unit'])} then, "
                             f"{_number(a[0], '')}–{_number(a[1], now['unit'])} now)")
            elif worse > max_pct:
                found.append(line)
    return found, compared, noise


def submit(args) -> int:
    api = Api(args.url, args.token)
    workload = load_workload(args.workload)
    if args.title:
        workload["title"] = args.title
    run = api.call("POST", "runs/", json=workload)
    print(f"queued {run['public_id']}: {run['permalink']}", file=sys.stderr)
    if not args.wait:
        print(json.dumps(run, indent=1))
        return OK
    run = wait(api, run, poll_s=args.poll, timeout_s=args.timeout)
    results = api.call("GET", f"runs/{run['public_id']}/results/")
    print(summary(run, results))
    verdict = {"status": run["status"], "fatal_flags": fatal_flags(results, args.fatal_flag)}
    if args.baseline:
        found, compared, noise = regressions(results, baseline_results(api, args.baseline),
                                             args.metric or list(DEFAULT_METRICS), args.max_regression)
        verdict.update(baseline=args.baseline, compared=compared, regressions=found, within_noise=noise)
        if not compared:
            print(f"baseline {args.baseline}: no level matches this run's (same endpoint and load)")
        for line in noise:
            print(f"not failed, {line}")
    history = run.get("regression") or {}
    if args.history:
        verdict["history"] = [f"{r['endpoint']} @ {r['load']}: {r['figure']} {r['value']:.2f} vs {r['mean']:.2f} over "
                              f"{r['compared_runs']} comparable runs ({r['change_pct']:+.1f} % worse, z = {r['z']:.1f})"
                              for r in history.get("regressions", [])]
        for page in history.get("history", []):
            print(f"history: {page}")
        if history and not history.get("tested"):
            print("history: too few comparable runs yet to test this one")
    if args.output:
        Path(args.output).write_text(json.dumps({"run": run, "results": results, "verdict": verdict}, indent=1))
    code = OK
    if run["status"] != "succeeded":
        print(f"FAILED: the run ended {run['status']}", file=sys.stderr)
        code = RUN_FAILED
    elif verdict["fatal_flags"]:
        print("FAILED: fatal validity flags:\n  " + "\n  ".join(verdict["fatal_flags"]), file=sys.stderr)
        code = FATAL_FLAG
    elif verdict.get("regressions"):
        print(f"FAILED: regressed by more than {args.max_regression:g} % against {args.baseline}:\n  "
              + "\n  ".join(verdict["regressions"]), file=sys.stderr)
        code = REGRESSED
    elif verdict.get("history"):
        print("FAILED: regressed against this workload's history:\n  " + "\n  ".join(verdict["history"]),
              file=sys.stderr)
        code = REGRESSED
    return code


def status(args) -> int:
    run = Api(args.url, args.token).call("GET", f"runs/{args.run}/")
    print(progress_line(run))
    return OK


def cancel(args) -> int:
    run = Api(args.url, args.token).call("POST", f"runs/{args.run}/cancel/")
    print(progress_line(run))
    return OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="v100", description="Submit benchmark runs to v100site and check them in CI.",
                                epilog="Exit codes: 0 ok, 1 run failed (or cancelled, partial), 2 refused "
                                       "(bad workload, token, permission), 3 fatal validity flag, 4 regression, "
                                       "5 still running at --timeout.")
    p.add_argument("--url", default=os.environ.get("V100_URL", ""), help="the site, e.g. https://bench.example "
                                                                         "(default: $V100_URL)")
    p.add_argument("--token", default=os.environ.get("V100_TOKEN", ""), help="an API token (default: $V100_TOKEN)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", help="queue a run from a JSON or YAML workload file")
    s.add_argument("workload", help="a .json or .yaml file of run fields")
    s.add_argument("--title", help="overrides the file's title")
    s.add_argument("--wait", action="store_true", help="follow the run until it ends, then judge it")
    s.add_argument("--poll", type=float, default=2.0, help="seconds between progress checks (default 2)")
    s.add_argument("--timeout", type=float, default=6 * 3600, help="give up waiting after this many seconds")
    s.add_argument("--output", "-o", help="write the run, its results and the verdict here as JSON")
    s.add_argument("--fatal-flag", action="append", default=[], metavar="CODE",
                   help="a validity flag code that fails the job (repeatable), e.g. error_rate")
    s.add_argument("--baseline", help="a JSON file an earlier --output wrote, or a run's public id (write --baseline=ID: an id may begin with \"-\")")
    s.add_argument("--metric", action="append", metavar="FIGURE",
                   help=f"a figure to compare with the baseline (repeatable; default {', '.join(DEFAULT_METRICS)})")
    s.add_argument("--max-regression", type=float, default=10.0, metavar="PCT",
                   help="how much worse than the baseline a figure may be, in percent (default 10)")
    s.add_argument("--history", action="store_true",
                   help="fail (exit 4) when the site's regression test against the workload's last comparable runs "
                        "flags the run")
    s.set_defaults(handler=submit)
    for name, handler, text in (("status", status, "a run's status and progress"), ("cancel", cancel, "cancel a run")):
        c = sub.add_parser(name, help=text)
        c.add_argument("run", help="the run's public id")
        c.set_defaults(handler=handler)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except ClientError as e:
        print(f"v100: {e}", file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"v100: {e}", file=sys.stderr)
        return REFUSED
