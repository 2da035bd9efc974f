from rayfleet.train.tracking.progress import Progress, duration


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_is_due_at_the_cadence_and_not_before():
    clock = Clock()
    progress = Progress(total=100, start=0, every_s=10, clock=clock)
    clock.now += 9.9
    assert not progress.due()
    clock.now += 0.1
    assert progress.due()
    progress.line(10, "epoch 1/2", {})
    assert not progress.due()  # a line restarts the wait
    clock.now += 10
    assert progress.due()


def test_the_line_says_step_values_elapsed_and_remaining_from_the_rate_since_the_start():
    clock = Clock()
    progress = Progress(total=100, start=20, every_s=10, clock=clock)  # resumed at step 20
    clock.now += 40  # 20 steps in 40 s: 2 s/step, 60 steps left
    line = progress.line(40, "epoch 2/5", {"loss": "0.5000", "img/s": "1,234"})
    assert line == "epoch 2/5  step 40/100  loss 0.5000  img/s 1,234  elapsed 0m40s  remaining ~2m00s"


def test_no_cadence_means_no_line_and_no_progress_yet_means_no_estimate():
    clock = Clock()
    assert not Progress(total=10, start=0, every_s=0, clock=clock).due()
    progress = Progress(total=10, start=3, every_s=1, clock=clock)
    clock.now += 5
    assert progress.line(3, "x", {}).endswith("remaining ?")


def test_durations_read_as_minutes_or_hours():
    assert [duration(s) for s in (0, 59.9, 61, 3600, 3 * 3600 + 5 * 60 + 7)] == [
        "0m00s",
        "0m59s",
        "1m01s",
        "1h00m",
        "3h05m",
    ]
