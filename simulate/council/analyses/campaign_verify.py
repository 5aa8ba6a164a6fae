"""``chorus council campaign-verify``: the BDA paper's drift guard (``chorus.simulate.council.campaign.
verify_campaign``) over a campaign: every trace file's sha256, the inventory recounted in plain Python, the
cheap sections (``--all``: every section) re-exported and compared number by number; a check whose record
lists every difference, exit 1 on any beyond the tolerance."""
from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from chorus.core.analyses import AnalysisConfig, Result, analysis, run_dir


class CampaignVerifyConfig(AnalysisConfig):
    campaign: run_dir("campaign") = Field(description="A campaign directory (numbers.json; chorus paper bda).")
    all: bool = Field(False, description="Re-derive every section, not only the cheap ones.")
    tolerance: float = Field(1.5e-3, description="Largest allowed difference (the paper's drift guard).")

    @field_validator("tolerance")
    @classmethod
    def _not_negative(cls, v: float) -> float:   # (NaN and infinity the config refuses as not finite)
        if v < 0:
            raise ValueError("must be a finite number >= 0")
        return v


def show(console, result: Result) -> None:
    from rich.markup import escape
    s = result.summary
    for b in s["differences"][:20]:   # (a difference names trace files: [path] is not markup)
        console.print(f"[red]differs[/] {escape(str(b['where']))}: stored {escape(repr(b['stored']))}, re-derived "
                      f"{escape(repr(b['derived']))}", highlight=False, soft_wrap=True)
    if not s["differences"]:
        console.print(f"[bold green]OK[/]: {s['compared']} numbers re-derived within {s['tolerance']} (trace hashes, "
                      f"inventory, sections {', '.join(s['sections']) or 'none'})")


def brief(summary: dict) -> dict:
    return {"compared": summary["compared"], "differences": len(summary["differences"]),
            "sections": ", ".join(summary["sections"]) or "none"}


def fails(summary: dict) -> Optional[str]:
    n = len(summary["differences"])
    return (f"{n} of {summary['compared']} numbers differ beyond {summary['tolerance']} in {summary['numbers']}"
            if n else None)


@analysis("council", config=CampaignVerifyConfig, show=show, brief=brief, fails=fails)
def campaign_verify():
    """The drift guard: re-derive the numbers file from its stores (trace hashes, the inventory recounted in
    plain Python, the cheap sections or --all); exit 1 on any difference beyond the tolerance."""
    from chorus.simulate.council.campaign import verify_campaign

    def compute(cfg: CampaignVerifyConfig) -> Result:
        n, bad, redo = verify_campaign(cfg.campaign, full=cfg.all, tolerance=cfg.tolerance)
        return Result(summary={"numbers": str(cfg.campaign / "numbers.json"), "compared": n, "tolerance": cfg.tolerance,
                               "sections": list(redo),
                               "differences": [{"where": b.where, "stored": b.stored, "derived": b.derived}
                                               for b in bad]})
    return compute
