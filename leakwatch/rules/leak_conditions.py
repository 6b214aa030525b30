"""The conditions the GPU and host leak alerts share.

Leak rules share one shape, because vLLM's memory is flat after warm-up and a one-time step (the
first long request, a new batch shape) must not page:
  * the growth rate is a low quantile of deriv() over the window's slices (a step lies in one);
  * normalised per request served in the window, or above the post-warm-up baseline;
  * windows that reach back to a vLLM (re)start and its warm-up are skipped;
  * a critical twin forecasts exhaustion at the current growth and is labelled for remediation.
The helpers here write the parts of it that more than one group uses: the growth-rate floor, the
net growth of the lows, and the hysteresis that keeps a firing leak alert firing."""

from __future__ import annotations

from ..core.alert_config import number
from .recording import Context


def grows_faster(rate_series: str, min_rate: float) -> str:
    """The recorded growth rate above the section's floor (bytes/s): growth too slow to matter
    does not page."""
    return f"({rate_series} > {number(min_rate)})"


def still_leaking(
    ctx: Context, sec, value: str, low_growths: list[str], released: str, restarted: str, per_host: bool = False
) -> str:
    """Hysteresis for a firing leak alert: its figure (`value`, so the notification still says what
    the alert measures) while the lows still rise over any of the given windows, the memory gave
    nothing back, and vLLM was not restarted (`restarted` per side, or per host for a card's)."""
    rising = "\n  or ".join(f"{name} > 0" for name in low_growths)
    return (
        f"({value})\nand (\n  {rising}\n)\nunless ({released} > {number(sec.size('release_min'))})\n"
        f"unless {ctx.on_host() if per_host else ctx.on_side()} {restarted}"
    )


def net_growth(sec, low_growth: str, released: str | None = None, on: str = "") -> str:
    """The lows rose across the window, and (for windows shorter than a release period) the memory
    gave nothing back lately: a sawtooth of creep and release is not a leak."""
    text = f"and {on}({low_growth} > {number(sec.size('lows_min_growth'))})\n"
    if released:
        text += f"unless {on}({released} > {number(sec.size('release_min'))})\n"
    return text
