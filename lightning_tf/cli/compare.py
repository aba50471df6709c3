"""``lightning-tf compare``: two systems' translations of the same sentences compared by sacreBLEU's paired
bootstrap resampling (:func:`lightning_tf.text.paired_bootstrap` does the work)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["compare"]


def _lines(path: str, what: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file {p} does not exist")
    return p.read_text(encoding="utf-8").rstrip("\n").split("\n")


def compare(
    baseline: str,
    system: str,
    *,
    references: str,
    metrics: list[str] | None = None,
    n_samples: int = 1000,
    seed: int = 12345,
) -> None:
    """Compare two systems' outputs (one detokenised sentence a line, aligned with the references) by paired
    bootstrap resampling: each metric's scores, 95% confidence intervals and the p-value of the difference.

    Args:
        baseline: the baseline system's translations (text file)
        system: the other system's translations (text file)
        references: the reference translations (text file)
        metrics: among bleu, chrf, chrfpp, ter (default: bleu chrf ter)
        n_samples: bootstrap resamples
        seed: resampling seed
    """
    from lightning_tf.text import paired_bootstrap

    refs = _lines(references, "references")
    rows = paired_bootstrap(
        refs,
        _lines(baseline, "baseline"),
        _lines(system, "system"),
        metrics=tuple(metrics or ("bleu", "chrf", "ter")),
        n_samples=n_samples,
        seed=seed,
    )
    print(f"paired bootstrap, {n_samples} resamples of {len(refs)} sentences (baseline: {baseline}, system: {system})")
    print(f"{'metric':<8} {'baseline':>18} {'system':>18} {'delta':>8} {'p-value':>8}")
    for r in rows:
        mark = " *" if r.significant() else ""
        print(
            f"{r.metric:<8} {r.baseline:>7.2f} ({r.baseline_mean:.2f}±{r.baseline_ci:.2f}) "
            f"{r.system:>7.2f} ({r.system_mean:.2f}±{r.system_ci:.2f}) {r.delta:>+8.2f} {r.p_value:>8.4f}{mark}"
        )
    print("* p < 0.05; (mean ± 95% confidence interval over the resamples); TER: lower is better")
