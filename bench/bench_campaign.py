"""Benchmark of the campaign numbers file and the BDA paper report (``simulate/council/campaign*.py``,
``paper.py``) on a synthetic campaign store: three binary sets, a K = 3 and a K = 4 set, clean and
k = 1 / k = 2 persistent coalitions, three generation seeds (count-level councils: the science is
checkable exactly, no model). Times the export per section, the drift guard, and the rendering;
keeps the rendered report and its figures.

    .venv/bin/python bench/bench_campaign.py --questions 100 --out bench/results/campaign-synthetic.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _recorder import machine, write_result  # noqa: E402  (bench/ is the script directory)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=100, help="questions per dataset (x 3 seeds)")
    ap.add_argument("--n-resamples", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "campaign-synthetic.json")
    ap.add_argument("--report-dir", type=Path, default=None, help="where paper.md and figures/ are kept "
                                                                  "(default: beside --out, named after it)")
    a = ap.parse_args()
    from chorus.simulate.council.campaign import CampaignConfig, build_campaign, verify_campaign
    from chorus.simulate.council.campaign_sections import SECTIONS
    from chorus.simulate.council.campaign_synthetic import write_store
    from chorus.papers.bda import render_paper

    info = {"machine": machine(), "questions_per_dataset": a.questions, "seeds": 3}
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "synthetic"
        write_store(store, n_questions=a.questions)
        import subprocess
        chorus = str(Path(sys.executable).with_name("chorus"))
        sweeps, info["sweeps_s"] = [], {}
        for name in ("sweep_dose", "sweep_sleeper"):   # the shipped grids, as the paper embeds them
            t = time.perf_counter()
            subprocess.run([chorus, "aggregate", "sweep", name, "--out", str(Path(tmp) / name), "--quiet"], check=True,
                           stdout=subprocess.DEVNULL)
            info["sweeps_s"][name] = round(time.perf_counter() - t, 2)
            sweeps.append(str(Path(tmp) / name))
        cfg = CampaignConfig(inputs=[str(store)], n_resamples=a.n_resamples, sweeps=sweeps)
        times, t0 = {}, time.perf_counter()
        last = [t0]
        names = cfg.chosen()

        def tick(total, k):
            if k:
                now = time.perf_counter()
                times[names[len(times)]] = round(now - last[0], 2)
                last[0] = now
        camp = Path(tmp) / "campaign"
        build_campaign(cfg, camp, progress=tick)
        info["export_s"] = round(time.perf_counter() - t0, 2)
        info["export_s_by_section"] = times
        t1 = time.perf_counter()
        n, bad, redo = verify_campaign(camp)
        info["verify"] = {"numbers_compared": n, "mismatches": len(bad), "sections_rederived": redo,
                          "seconds": round(time.perf_counter() - t1, 2)}
        t2 = time.perf_counter()
        md = render_paper(camp)
        info["render_s"] = round(time.perf_counter() - t2, 2)
        numbers = json.loads((camp / "numbers.json").read_text())
        info["cells"] = len(numbers["cells"])
        info["sections"] = {k: ("missing: " + v["missing"]) if "missing" in v else "present"
                            for k, v in numbers["sections"].items()}
        info["numbers_bytes"] = (camp / "numbers.json").stat().st_size
        keep = a.report_dir or a.out.with_suffix("")
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir(parents=True)
        text = md.read_text().replace(str(store), "SYNTHETIC_STORE").replace(tmp, "TMP")  # no temporary path kept
        (keep / "paper.md").write_text(text)
        shutil.copytree(camp / "figures", keep / "figures")
        # numbers.json (about 1.7 MB at 100 questions, its store a temporary folder) is not kept: the command remakes it
        info["report"] = str(keep.relative_to(ROOT)) if keep.is_relative_to(ROOT) else str(keep)
        assert set(SECTIONS) == set(numbers["sections"])
    write_result(a.out, info)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
