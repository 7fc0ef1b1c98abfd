"""CancelController and CancelSignal (api.md, "Cancellation")."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

import toolrail as tr


class Recorder:
    """A callback that counts its calls (a class, so a weak reference can watch it)."""

    def __init__(self, log: list[str] | None = None, label: str = "") -> None:
        self.calls = 0
        self.log = log
        self.label = label

    def __call__(self) -> None:
        self.calls += 1
        if self.log is not None:
            self.log.append(self.label)


# ---- CancelController ---------------------------------------------------------------


def test_a_new_controller_has_a_pending_signal() -> None:
    controller = tr.CancelController()
    assert isinstance(controller.signal, tr.CancelSignal)
    assert controller.signal.cancelled is False
    assert controller.signal.reason is None


def test_controller_takes_no_arguments() -> None:
    with pytest.raises(TypeError):
        tr.CancelController("now")  # type: ignore[call-arg]


def test_controller_keeps_the_same_signal() -> None:
    controller = tr.CancelController()
    assert controller.signal is controller.signal


def test_cancel_fires_the_signal_with_the_default_reason_cancelled() -> None:
    controller = tr.CancelController()
    controller.cancel()
    assert controller.signal.cancelled is True
    assert controller.signal.reason == "cancelled"


def test_cancel_fires_the_signal_with_the_given_reason() -> None:
    controller = tr.CancelController()
    controller.cancel("user pressed stop")
    assert controller.signal.cancelled is True
    assert controller.signal.reason == "user pressed stop"


def test_cancel_is_idempotent_and_the_first_reason_stays() -> None:
    controller = tr.CancelController()
    callback = Recorder()
    controller.signal.add_callback(callback)
    controller.cancel("first")
    controller.cancel("second")
    controller.cancel()
    assert controller.signal.cancelled is True
    assert controller.signal.reason == "first"
    assert callback.calls == 1


def test_separate_controllers_do_not_share_signals() -> None:
    a = tr.CancelController()
    b = tr.CancelController()
    a.cancel()
    assert a.signal is not b.signal
    assert b.signal.cancelled is False


# ---- add_callback ---------------------------------------------------------------------


def test_a_callback_runs_when_the_signal_fires() -> None:
    controller = tr.CancelController()
    callback = Recorder()
    disposer = controller.signal.add_callback(callback)
    assert isinstance(disposer, tr.Disposer)
    assert callback.calls == 0
    controller.cancel()
    assert callback.calls == 1


def test_a_callback_added_after_cancel_runs_at_once() -> None:
    controller = tr.CancelController()
    controller.cancel("done")
    callback = Recorder()
    disposer = controller.signal.add_callback(callback)
    assert callback.calls == 1
    assert isinstance(disposer, tr.Disposer)
    disposer()  # harmless
    controller.cancel()
    assert callback.calls == 1


def test_a_disposed_callback_does_not_run() -> None:
    controller = tr.CancelController()
    kept = Recorder()
    removed = Recorder()
    controller.signal.add_callback(kept)
    disposer = controller.signal.add_callback(removed)
    disposer()
    assert disposer.disposed is True
    controller.cancel()
    assert removed.calls == 0
    assert kept.calls == 1


def test_disposing_a_callback_twice_does_nothing_more() -> None:
    controller = tr.CancelController()
    callback = Recorder()
    disposer = controller.signal.add_callback(callback)
    disposer()
    disposer()
    controller.cancel()
    assert callback.calls == 0


def test_disposing_a_callback_after_it_ran_does_nothing() -> None:
    controller = tr.CancelController()
    callback = Recorder()
    disposer = controller.signal.add_callback(callback)
    controller.cancel()
    disposer()
    assert callback.calls == 1


def test_a_disposed_callback_is_not_kept_alive_by_the_signal() -> None:
    controller = tr.CancelController()
    callback = Recorder()
    watch = weakref.ref(callback)
    disposer = controller.signal.add_callback(callback)
    disposer()
    del callback
    gc.collect()
    assert watch() is None


def test_callbacks_run_in_the_order_they_were_added() -> None:
    controller = tr.CancelController()
    log: list[str] = []
    for label in ("one", "two", "three"):
        controller.signal.add_callback(Recorder(log, label))
    controller.cancel()
    assert log == ["one", "two", "three"]


def test_the_same_callback_added_twice_runs_twice() -> None:
    controller = tr.CancelController()
    callback = Recorder()
    controller.signal.add_callback(callback)
    controller.signal.add_callback(callback)
    controller.cancel()
    assert callback.calls == 2


def test_the_signal_is_already_cancelled_when_callbacks_run() -> None:
    controller = tr.CancelController()
    seen: list[tuple[bool, str | None]] = []
    controller.signal.add_callback(
        lambda: seen.append((controller.signal.cancelled, controller.signal.reason))
    )
    controller.cancel("why")
    assert seen == [(True, "why")]


# ---- wait -----------------------------------------------------------------------------


async def test_wait_returns_after_cancel() -> None:
    controller = tr.CancelController()
    returned = asyncio.Event()

    async def waiter() -> None:
        await controller.signal.wait()
        returned.set()

    task = asyncio.create_task(waiter())
    # let the waiter reach its await: it must still be waiting
    ready = asyncio.Event()
    asyncio.get_running_loop().call_soon(ready.set)
    await asyncio.wait_for(ready.wait(), 5)
    assert not returned.is_set()
    assert not task.done()
    controller.cancel()
    await asyncio.wait_for(returned.wait(), 5)
    await asyncio.wait_for(task, 5)


async def test_wait_returns_at_once_when_already_cancelled() -> None:
    controller = tr.CancelController()
    controller.cancel()
    await asyncio.wait_for(controller.signal.wait(), 5)


async def test_several_waiters_all_return_after_cancel() -> None:
    controller = tr.CancelController()
    tasks = [asyncio.create_task(controller.signal.wait()) for _ in range(3)]
    ready = asyncio.Event()
    asyncio.get_running_loop().call_soon(ready.set)
    await asyncio.wait_for(ready.wait(), 5)
    assert not any(task.done() for task in tasks)
    controller.cancel()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)


# ---- never ----------------------------------------------------------------------------


def test_never_is_a_pending_signal() -> None:
    signal = tr.CancelSignal.never()
    assert isinstance(signal, tr.CancelSignal)
    assert signal.cancelled is False
    assert signal.reason is None


def test_never_does_not_run_callbacks_and_returns_a_disposer() -> None:
    callback = Recorder()
    disposer = tr.CancelSignal.never().add_callback(callback)
    assert isinstance(disposer, tr.Disposer)
    disposer()
    assert callback.calls == 0
    assert tr.CancelSignal.never().cancelled is False


def test_never_keeps_no_callbacks() -> None:
    signal = tr.CancelSignal.never()
    callback = Recorder()
    watch = weakref.ref(callback)
    signal.add_callback(callback)
    del callback
    gc.collect()
    assert watch() is None


async def test_waiting_on_never_does_not_return() -> None:
    task = asyncio.create_task(tr.CancelSignal.never().wait())
    done, _ = await asyncio.wait({task}, timeout=0.05)
    assert not done
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


# ---- any ------------------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1])
def test_any_fires_when_either_input_fires_with_that_reason(which: int) -> None:
    controllers = [tr.CancelController(), tr.CancelController()]
    derived = tr.CancelSignal.any(controllers[0].signal, controllers[1].signal)
    callback = Recorder()
    derived.add_callback(callback)
    assert derived.cancelled is False
    assert derived.reason is None
    controllers[which].cancel(f"input {which}")
    assert derived.cancelled is True
    assert derived.reason == f"input {which}"
    assert callback.calls == 1
    assert controllers[1 - which].signal.cancelled is False


def test_any_keeps_the_first_reason_when_both_inputs_fire() -> None:
    a = tr.CancelController()
    b = tr.CancelController()
    derived = tr.CancelSignal.any(a.signal, b.signal)
    callback = Recorder()
    derived.add_callback(callback)
    b.cancel("b first")
    a.cancel("a second")
    assert derived.reason == "b first"
    assert callback.calls == 1


@pytest.mark.parametrize("which", [0, 1])
def test_any_of_an_already_cancelled_input_is_already_cancelled(which: int) -> None:
    controllers = [tr.CancelController(), tr.CancelController()]
    controllers[which].cancel("early")
    derived = tr.CancelSignal.any(controllers[0].signal, controllers[1].signal)
    assert derived.cancelled is True
    assert derived.reason == "early"
    callback = Recorder()
    derived.add_callback(callback)
    assert callback.calls == 1


def test_any_with_never_fires_when_the_other_input_fires() -> None:
    controller = tr.CancelController()
    derived = tr.CancelSignal.any(tr.CancelSignal.never(), controller.signal)
    assert derived.cancelled is False
    controller.cancel("stop")
    assert derived.cancelled is True
    assert derived.reason == "stop"


def test_any_of_only_never_signals_never_fires() -> None:
    derived = tr.CancelSignal.any(tr.CancelSignal.never(), tr.CancelSignal.never())
    assert derived.cancelled is False


async def test_waiting_on_any_returns_when_an_input_fires() -> None:
    a = tr.CancelController()
    b = tr.CancelController()
    derived = tr.CancelSignal.any(a.signal, b.signal)
    task = asyncio.create_task(derived.wait())
    ready = asyncio.Event()
    asyncio.get_running_loop().call_soon(ready.set)
    await asyncio.wait_for(ready.wait(), 5)
    assert not task.done()
    b.cancel()
    await asyncio.wait_for(task, 5)


def test_an_inputs_other_callbacks_still_run_when_a_derived_signal_hangs_off_it() -> None:
    a = tr.CancelController()
    b = tr.CancelController()
    derived = tr.CancelSignal.any(a.signal, b.signal)
    later = Recorder()
    a.signal.add_callback(later)
    raised: Exception | None = None
    try:
        a.cancel("stop")
    except Exception as exc:
        raised = exc
    assert raised is None
    assert later.calls == 1
    assert derived.cancelled is True


def test_a_fired_derived_signal_keeps_no_callbacks_on_its_inputs() -> None:
    a = tr.CancelController()
    b = tr.CancelController()
    derived = tr.CancelSignal.any(a.signal, b.signal)
    a.cancel()
    assert derived.cancelled is True
    # b is still pending and long-lived: nothing of the finished derived signal remains
    assert b.signal._callbacks == {}


def test_a_collected_derived_signal_keeps_no_callbacks_on_its_inputs() -> None:
    a = tr.CancelController()
    b = tr.CancelController()
    derived = tr.CancelSignal.any(a.signal, b.signal)
    watch = weakref.ref(derived)
    del derived
    gc.collect()
    assert watch() is None
    assert a.signal._callbacks == {}
    assert b.signal._callbacks == {}
    a.cancel()  # firing an input afterwards is harmless
