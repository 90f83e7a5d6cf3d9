"""The decision by measurement of the hot-set size; :class:`KeepUpGuard`."""
import logging
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from pyg_orch.offload.hot_set import HotSetSizer

logger = logging.getLogger('pyg_orch.offload')

#: The hot ratio of the default candidate between none and the largest.
DEFAULT_HOT_RATIO = 0.05
#: The largest default candidate is this many times :obj:`hot_ratio` ...
LARGE_FACTOR = 3.0
#: ... and at most this fraction of the vertices.
MAX_RATIO = 0.5
#: The key of plain training's step times re-measured after the candidates.
PLAIN_AGAIN = -1


def candidate_ratios(hot_ratio: float,
                     ratios: Optional[Sequence[float]] = None
                     ) -> Tuple[float, ...]:
    r"""The hot ratios to try, ascending, :obj:`0` (plain training) first."""
    if ratios is None:
        ratios = (hot_ratio, min(LARGE_FACTOR * hot_ratio, MAX_RATIO))
    return tuple(sorted({0.0, *(float(r) for r in ratios)}))


#: Standard errors a size must beat plain training by (see :func:`decide`).
NOISE_Z = 2.0


def median_error(times: Sequence[float]) -> float:
    r"""The standard error of the median of :obj:`times` (from its MAD)."""
    if len(times) < 3:
        return 0.0
    mid = statistics.median(times)
    mad = statistics.median(abs(t - mid) for t in times)
    # 1.4826 MAD estimates a standard deviation; the median's standard
    # error is sqrt(pi / 2) times the mean's.
    return 1.2533 * 1.4826 * mad / len(times)**0.5


def decide(times: Dict[int, List[float]], margin: float
           ) -> Tuple[int, str]:
    r"""The size of the lowest median step time if it beats plain training by
    :obj:`margin` and the noise, else :obj:`0`; and why."""
    medians = {n: statistics.median(t) for n, t in times.items() if t}
    plain = compared_plain(medians)
    best = min((n for n in medians if n > 0),
               key=lambda n: (medians[n], n), default=None)
    if best is None:
        return 0, 'no hot-set size other than none was measured'
    speedup = plain / max(medians[best], 1e-12)
    again = ''
    if PLAIN_AGAIN in medians:
        again = (f'; plain training timed again after the candidates: '
                 f'{medians[PLAIN_AGAIN] * 1e3:.4g} ms (first '
                 f'{medians[0] * 1e3:.4g} ms; the faster counts)')
    plain_key = PLAIN_AGAIN if medians.get(PLAIN_AGAIN, plain) < medians[0] \
        else 0
    noise = NOISE_Z * (median_error(times[plain_key])**2
                       + median_error(times[best])**2)**0.5
    if medians[best] < (1.0 - margin) * plain - noise:
        return best, (f'{best} hot vertices: median step '
                      f'{medians[best]  * 1e3:.4g} ms vs. '
                      f'{plain  * 1e3:.4g} ms without offload '
                      f'({speedup:.3g}x, more than the {margin:.0%} margin)'
                      f'{again}')
    within = ''
    if medians[best] < (1.0 - margin) * plain:
        within = (f', within the noise of the step times: '
                  f'{noise * 1e3:.3g} ms beside the margin')
    return 0, (f'no hot-set size was more than {margin:.0%} faster than '
               f'plain training (best: {best} hot vertices, median step '
               f'{medians[best]  * 1e3:.4g} ms vs. {plain  * 1e3:.4g} ms, '
               f'{speedup:.3g}x{within}){again}; offload off')


def compared_plain(medians: Dict[int, float]) -> float:
    r"""The lower of plain training's two median step times."""
    again = medians.get(PLAIN_AGAIN)
    return medians[0] if again is None else min(medians[0], again)


class StepTimeChooser:
    r"""Times training steps with every candidate hot-set size in turn
    (:obj:`0` included, :obj:`warmup` steps dropped) and chooses one (see
    :func:`decide`); plain training is timed again before choosing another
    size (:obj:`recheck`): a process's first steps can be slower.

    Args:
        give_up (float, optional): Larger sizes are not tried once a size was
            this much slower than plain training.
        sync (callable, optional): Called before reading the clock around
            timed steps.
    """
    #: The defaults of :class:`~pyg_orch.offload.BottomLayerOffload`.
    WARMUP = 3
    STEPS = 10
    MARGIN = 0.02
    GIVE_UP = 0.05

    def __init__(self, candidates: Sequence[int], warmup: int = 3,
                 steps: int = 10, margin: float = 0.02,
                 clock: Callable[[], float] = time.perf_counter,
                 sync: Optional[Callable[[], None]] = None,
                 give_up: Optional[float] = 0.05, recheck: bool = True):
        self.candidates = [int(n) for n in candidates]
        if 0 not in self.candidates:
            raise ValueError("'candidates' must hold 0 (plain training)")
        if len(set(self.candidates)) != len(self.candidates):
            raise ValueError(f"'candidates' must differ (got "
                             f"{self.candidates})")
        if warmup < 0 or steps < 1:
            raise ValueError(f"'warmup' must be >= 0 and 'steps' >= 1 (got "
                             f"{warmup}, {steps})")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"'margin' must be in [0, 1) (got {margin})")
        if give_up is not None and not give_up >= 0.0:
            raise ValueError(f"'give_up' must be None or >= 0 (got "
                             f"{give_up})")
        self.give_up = give_up
        self.recheck = bool(recheck)
        #: Whether plain training is being timed again.
        self.rechecking = False
        #: Candidates not tried (see :obj:`give_up`).
        self.skipped: List[int] = []
        #: Candidates that could not be put in effect (see :meth:`tick`).
        self.unusable: List[int] = []
        self.warmup, self.steps, self.margin = int(warmup), int(steps), margin
        self.clock, self.sync = clock, sync
        self.index = 0
        self.times: Dict[int, List[float]] = {n: [] for n in self.candidates}
        self._seen = 0  # Steps timed with the current candidate.
        self._last: Optional[float] = None
        self.choice: Optional[int] = None
        self.reason: Optional[str] = None

    @property
    def current(self) -> int:
        r"""The candidate in effect (the choice once :attr:`done`)."""
        if self.done:
            return self.choice
        return 0 if self.rechecking else self.candidates[self.index]

    @property
    def done(self) -> bool:
        r"""Whether the choice is made."""
        return self.choice is not None

    def pause(self) -> None:
        r"""The next interval is no training step: not timed."""
        self._last = None

    def tick(self, count: bool = True,
             unusable: bool = False) -> Optional[int]:
        r"""A step starts; returns a candidate to switch to, the choice, or
        :obj:`None`."""
        if self.done:
            return None
        if unusable and self.candidates[self.index] != 0:
            return self._drop_unusable()
        counted = count and self._last is not None
        seen = self._seen + 1 if counted else self._seen
        if seen >= self.warmup + self.steps:
            seen = 0  # The next candidate starts.
        if self.sync is not None and (
                (counted and self._seen + 1 > self.warmup)
                or seen + 1 > self.warmup):
            # Only around timed steps: the device may run ahead during warm-up.
            self.sync()
        now = self.clock()
        last, self._last = self._last, now
        if last is None or not count:
            return None
        self._seen += 1
        if self._seen > self.warmup:
            key = PLAIN_AGAIN if self.rechecking else self.current
            self.times[key].append(now - last)
        if self._seen < self.warmup + self.steps:
            return None
        self._seen = 0
        if self.rechecking:
            return self._choose()
        self.index += 1
        self._maybe_give_up()
        return self._next()

    def _next(self) -> int:
        # The next candidate, or the choice once every one had its turn.
        if self.index < len(self.candidates):
            return self.candidates[self.index]
        times = self._agreed_times()
        if self.recheck and PLAIN_AGAIN not in times and decide(
                times, self.margin)[0] != 0:
            self.rechecking = True
            self.times[PLAIN_AGAIN] = []
            return 0
        return self._choose(times)

    def _choose(self, times: Optional[Dict[int, List[float]]] = None
                ) -> int:
        # The choice, from every measured candidate.
        self.rechecking = False
        self.times = self._agreed_times() if times is None else times
        self.choice, self.reason = decide(self.times, self.margin)
        if self.skipped:
            self.reason += (f'; not tried: {self.skipped} hot vertices '
                            f'(a smaller hot set was more than '
                            f'{self.give_up:.0%} slower than plain '
                            f'training)')
        if self.unusable:
            self.reason += (f'; not usable: {self.unusable} hot vertices '
                            f'(the CPU did not compute their rows within '
                            f'the sample-age bound)')
        return self.choice

    def _drop_unusable(self) -> int:
        # Drops this candidate and larger ones; the ending step is not timed.
        first = self.candidates[self.index]
        rest = self.candidates[self.index:]
        self.unusable += [n for n in rest if n >= first]
        self.candidates = self.candidates[:self.index] + [
            n for n in rest if n < first]
        for n in self.unusable:
            self.times[n] = []
        self._seen, self._last = 0, None
        return self._next()

    def _maybe_give_up(self) -> None:
        # Drops larger candidates if this one was `give_up` slower than plain.
        last = self.candidates[self.index - 1]
        rest = self.candidates[self.index:]
        if self.give_up is None or last == 0 or not any(n > last
                                                        for n in rest):
            return
        times = self._agreed_times()
        if not times[0] or not times[last] or statistics.median(
                times[last]) <= (1.0 + self.give_up) * statistics.median(
                    times[0]):
            return
        self.skipped += [n for n in rest if n > last]
        self.candidates = self.candidates[:self.index] + [
            n for n in rest if n <= last]

    def _agreed_times(self) -> Dict[int, List[float]]:
        r"""The step times that decide (every rank's mean under DDP)."""
        return self.times

    def summary(self) -> Dict[str, Any]:
        r"""The candidates, their median step times and the choice."""
        medians = {
            n: statistics.median(t) if t else None
            for n, t in self.times.items()
        }
        plain = medians[0]
        if plain is not None:
            plain = compared_plain({n: m for n, m in medians.items()
                                    if m is not None})
        chosen = None if self.choice is None else medians[self.choice]
        return {
            'candidates': [{
                'num_hot': n,
                'median_step_s': medians[n],
                'measured_steps': len(self.times[n]),
                'usable': n not in self.unusable,
            } for n in sorted(self.candidates + self.skipped +
                              self.unusable)],
            'chosen_num_hot': self.choice,
            'plain_again_median_step_s': medians.get(PLAIN_AGAIN),
            'speedup': plain / chosen if plain and chosen else None,
            'margin': self.margin,
            'reason': self.reason,
        }


class _Shrinker:
    # Shrinks a hot set; the tables follow once `drain` steps settled it.
    hot: HotSetSizer
    drain: int
    on_resize: Callable[[], None]
    _drain_left: Optional[int] = None
    _then: Callable[[], None]

    def _shrink(self, size: int, then: Callable[[], None]) -> None:
        self._then = then
        self.hot.resize(size)
        if self.hot.settling:
            self._drain_left = self.drain
        else:
            then()

    def _draining(self) -> bool:
        # Whether a step went to draining (`then` once it settled).
        if self._drain_left is None:
            return False
        self._drain_left -= 1
        if self._drain_left <= 0:
            self._then()
        return True

    def _settle(self) -> None:
        self._drain_left = None
        self.hot.settle()
        self.on_resize()


class HotSetTuner(_Shrinker):
    r"""Applies a :class:`StepTimeChooser` to a hot set; once a shrink
    settled (:obj:`drain` steps), :obj:`on_done` gets the final size.

    Args:
        max_hold (int, optional): The most steps to wait for a larger hot set
            to be in use before timing it (:obj:`None`: until it is, or
            :obj:`cannot_keep_up` drops it and every larger one).
    """
    #: The default :obj:`max_hold`.
    MAX_HOLD = 50

    def __init__(self, hot: HotSetSizer, chooser: StepTimeChooser,
                 ratios: Sequence[float], on_resize: Callable[[], None],
                 on_done: Callable[[int], None], drain: int = 2,
                 max_hold: Optional[int] = MAX_HOLD,
                 cannot_keep_up: Optional[Callable[[], bool]] = None):
        self.hot = hot
        self.chooser = chooser
        self.ratios = dict(zip(chooser.candidates, ratios))
        self.on_resize, self.on_done = on_resize, on_done
        self.drain = int(drain)
        self.max_hold = None if max_hold is None else int(max_hold)
        self.cannot_keep_up = cannot_keep_up
        self._held = 0
        self._timing = False
        self.state = 'trial'
        # Training steps seen, and what happened at which of them:
        self.num_steps = 0
        self.events: List[Dict[str, Any]] = []
        # No batch was sampled yet: the first candidate at once.
        hot.resize(chooser.current, settle=True)
        on_resize()

    @property
    def trying(self) -> bool:
        r"""Whether a hot set has been tried (only plain training before)."""
        return self.chooser.index > 0 or self.chooser.done

    def pause(self) -> None:
        r"""Training paused: the next step is not timed."""
        self.chooser.pause()

    def step(self) -> None:
        r"""A training step starts."""
        self.num_steps += 1
        if self._draining():
            return
        # Once a candidate is timed, every later step of it is timed too.
        unusable = False
        if not self._timing:
            unusable = self.hot.planned > self.hot.size and \
                self.cannot_keep_up is not None and self.cannot_keep_up()
            self._timing = not unusable and (
                self.hot.size >= self.hot.planned
                or (self.max_hold is not None
                    and self._held >= self.max_hold))
            self._held += 1
        size = self.chooser.tick(count=self._timing, unusable=unusable)
        if unusable:  # The chooser leaves the hot set as it is.
            self._event('not usable', self.hot.planned)
        if size is None:
            return
        self._timing, self._held = False, 0
        if self.chooser.done:
            self._decided(size)
        elif self.chooser.rechecking:
            # Plain training again: timed once the shrink has settled.
            self._event('plain again', size)
            self._shrink(size, self._settled)
        else:
            self._event('trying', size)
            self.hot.resize(size)
            self.on_resize()

    def _event(self, what: str, num_hot: int) -> None:
        self.events.append({'step': self.num_steps, 'event': what,
                            'num_hot': int(num_hot)})

    def _decided(self, size: int) -> None:
        summary = self.summary()
        logger.info('BottomLayerOffload: %s; median step times (s) by '
                    'number of hot vertices: %s', summary['reason'], {
                        c['num_hot']: c['median_step_s']
                        for c in summary['candidates']
                    })
        self._event('chose', size)
        self.state = 'settling'
        self._shrink(size, self._finish)

    def _settled(self) -> None:
        # A shrink during the trial settled: timed from the next step on.
        self._settle()
        self.chooser.pause()

    def _finish(self) -> None:
        self._settle()
        self.state = 'decided'
        self._event('decided', self.chooser.choice)
        self.on_done(self.chooser.choice)

    def summary(self) -> Dict[str, Any]:
        r"""What :meth:`stats` reports as :obj:`'decision'`."""
        out = self.chooser.summary()
        for c in out['candidates']:
            c['hot_ratio'] = self.ratios.get(c['num_hot'])
        chosen = out['chosen_num_hot']
        out.update(mode='measure', state=self.state,
                   events=[dict(e) for e in self.events],
                   chosen_hot_ratio=None if chosen is None else
                   self.ratios.get(chosen))
        return out


class KeepUpGuard(_Shrinker):
    r"""Switches a kept hot set off where the CPU stops keeping up (rows
    late, or the loop waiting more than :obj:`max_wait` of the time)."""
    WINDOW = 20
    MAX_WAIT = 0.1

    def __init__(self, hot: HotSetSizer, cannot_keep_up: Callable[[], bool],
                 on_resize: Callable[[], None],
                 on_off: Callable[[int, str], None], drain: int = 2,
                 first_step: int = 0,
                 waited: Optional[Callable[[], float]] = None,
                 window: int = WINDOW, max_wait: float = MAX_WAIT,
                 clock: Callable[[], float] = time.perf_counter):
        self.hot, self.cannot_keep_up = hot, cannot_keep_up
        self.on_resize, self.on_off = on_resize, on_off
        self.drain = int(drain)
        self.num_steps = int(first_step)
        self.waited, self.clock = waited, clock
        self.window, self.max_wait = int(window), float(max_wait)
        self._mark: Optional[Tuple[float, float, int]] = None
        self.reason: Optional[str] = None
        self.done = False

    def _waiting_share(self) -> Optional[float]:
        # The share of the time the loop waited over the last window.
        if self.waited is None:
            return None
        now, waited = self.clock(), self.waited()
        if self._mark is None:
            self._mark = (now, waited, self.num_steps)
            return None
        start, waited_before, step = self._mark
        if self.num_steps - step < self.window:
            return None
        self._mark = (now, waited, self.num_steps)
        return (waited - waited_before) / max(now - start, 1e-9)

    def step(self) -> None:
        r"""A training step starts."""
        if self.done:
            return
        self.num_steps += 1
        if self._draining():
            return
        if self.hot.planned > self.hot.size and self.cannot_keep_up():
            self.reason = ('the CPU did not compute the rows of the hot '
                           'set within the sample-age bound')
        else:
            share = self._waiting_share()
            if share is None or share <= self.max_wait:
                return
            self.reason = (f'the training loop waited for CPU rows '
                           f'{share:.0%} of the time over {self.window} '
                           f'steps')
        self._shrink(0, self._off)

    def _off(self) -> None:
        self._settle()
        self.done = True
        self.on_off(self.num_steps, self.reason)
