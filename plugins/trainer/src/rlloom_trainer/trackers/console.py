"""``console`` tracker: a live progress bar (step, reward, step time, ETA) and validation lines."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

from rlloom_trainer.progress import show_on_bar


class ConsoleTracker:
    """On a terminal, a live bar; otherwise (CI, pipes) one plain line per step."""

    def __init__(self, run_dir: str, config: dict) -> None:
        self.total = int(config.get("trainer", {}).get("total_steps", 0)) or None
        self.console = Console(stderr=True)
        self.progress: Progress | None = None
        if self.console.is_terminal:
            self.progress = Progress(
                SpinnerColumn(), TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.description}"), TimeRemainingColumn(), console=self.console,
            )
            self.task = self.progress.add_task("", total=self.total)
            self.progress.start()
            show_on_bar(self.progress, self.task)  # validation shows on the bar
        self.console.print(f"rlloom run dir: {run_dir}", markup=False, highlight=False)

    def log(self, metrics: dict[str, float], step: int) -> None:
        validation = {k: v for k, v in metrics.items() if k.startswith("val-")}
        if validation:
            text = "  ".join(f"{k}={v:.3f}" for k, v in sorted(validation.items()))
            self.console.print(f"[validation @ step {step}] {text}", markup=False, highlight=False)
        if "critic/score/mean" not in metrics:
            return
        summary = (
            f"step {step}: reward {metrics['critic/score/mean']:.3f}  "
            f"step time {metrics.get('timing_s/step', float('nan')):.1f}s"
        )
        if self.progress is not None:
            self.progress.update(self.task, completed=step, description=summary)
        else:
            self.console.print(summary + (f" / {self.total}" if self.total else ""), markup=False, highlight=False)

    def close(self) -> None:
        if self.progress is not None:
            show_on_bar(None, None)
            self.progress.stop()
