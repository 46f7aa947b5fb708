"""Issue 45 item 2 on the CPU: ``train.compile`` off | on | auto, the compiled step and the fused optimizer.

The compiled paths are traced with AOT autograd's eager backend (``engine.COMPILE_BACKEND = "aot_eager"``): the
graphs Inductor would compile, without its minutes of C++ codegen on this CPU. What needs a GPU (the compiled step
inside the captured CUDA graph, ``auto``'s timing) is in tests/test_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

from conftest import run_depthlab
from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.store import Store
from depthlab.training import engine
from depthlab.training.optim import GroupOptimizer

ATTENTION_ONLY = {"name": "attention_only", "layers": 2, "heads": 1, "attention": "softmax", "init": "random"}
GPT_STYLE = {"name": "transformer", "layers": 1, "heads": 2, "width": 16}
# clipping, warm-up, a cosine schedule and weight decay: every part of the optimizer's update is in the step
TRAIN = {"optimizer": "adamw", "lr": 0.01, "steps": 60, "eval_every": 60, "batch_size": 16, "eval_examples": 64,
         "grad_clip": 1.0, "warmup_steps": 5, "weight_decay": 0.1, "schedule": "cosine"}


def configs(model: dict, seeds=(0, 1, 2), **train):
    return [parse_run({"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}, "model": model,
                       "train": {**TRAIN, **train}, "seed": s}) for s in seeds]


def group(store: Store, runs) -> engine.Group:
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in runs]
    return engine.Group(list(zip(runs, ids, strict=True)), store, len(runs))


@pytest.fixture(scope="module", autouse=True)
def fresh_compiler():
    """TorchDynamo's caches start and end empty in this module; within it, tests that compile the same step share
    what one compiled (a test that counts compiles resets them first)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def traced(monkeypatch):
    monkeypatch.setattr(engine, "COMPILE_BACKEND", "aot_eager")


@pytest.mark.parametrize("value, mode", [(True, "on"), (False, "off"), ("on", "on"), ("off", "off"),
                                         ("auto", "auto")])
def test_compile_takes_off_on_auto_and_the_old_true_false(value, mode):
    config = configs(ATTENTION_ONLY, (0,), compile=value)[0]
    assert config.train.compile == mode
    assert Store.run_id(config.to_dict()) == Store.run_id(configs(ATTENTION_ONLY, (0,))[0].to_dict())


@pytest.mark.parametrize("value", ["yes", "true", 1, None, "inductor"])
def test_any_other_compile_value_is_one_line_naming_the_field(value):
    with pytest.raises(UserError, match=r"^train\.compile: allowed: off, on, auto \(or true/false for on/off\)"):
        configs(ATTENTION_ONLY, (0,), compile=value)


def test_a_compile_value_that_is_none_of_them_is_exit_2_on_the_command_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("task: {name: icqa, k: 2, n_q: 4, n_a: 4}\nmodel: {name: attention_only, layers: 1}\n"
                    "train: {compile: sometimes}\n")
    code, out, err = run_depthlab("train", str(path), "--store", str(tmp_path / "store"))
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines() == ["error: train.compile: allowed: off, on, auto (or true/false for on/off) "
                                        "(got 'sometimes')"]


# the attention-only case last: the resume test after it trains the same configurations with its compiled step cached
@pytest.mark.parametrize("model", [GPT_STYLE, ATTENTION_ONLY], ids=["transformer", "attention_only"])
def test_the_compiled_step_trains_as_the_eager_step_over_50_steps(tmp_path, traced, model):
    """``on``: the forward and loss compiled (TorchDynamo, AOT autograd's backward) and the optimizer's update
    compiled; 50 steps give the eager step's weights and train sums within 1e-5 (float32: the traced graphs run
    the same ATen operations, up to decompositions that round differently in the last place)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    groups = {mode: group(Store(tmp_path / mode), configs(model, compile=mode)) for mode in ("off", "on")}
    for g in groups.values():
        for _ in range(50):
            g.step()
    assert groups["off"].step_mode() == "eager (cpu)"
    assert groups["on"].step_mode() == "eager (cpu) + compiled (aot_eager)"
    # three frames compiled (the forward with its loss, the optimizer's clipping and its update), each once: no
    # recompile
    assert counters["frames"]["ok"] == 3 and counters["aot_autograd"]["ok"] == 3, dict(counters["frames"])
    _close_but_the_key_bias(groups["off"], groups["on"])


def test_auto_resumes_in_the_mode_its_checkpoint_trained_in(tmp_path, traced):
    """A run's checkpoint records whether its step was compiled; ``auto`` resuming it continues so (here a run
    trained with ``on``, resumed with ``auto`` on the CPU, where ``auto`` alone would be off), and the result is
    the uninterrupted compiled run's. (The 50-step test's configurations: their compiled step is in the cache.)"""
    store = Store(tmp_path / "s")
    first = group(store, configs(ATTENTION_ONLY, compile="on"))
    for _ in range(10):
        first.step()
    resumed = group(store, configs(ATTENTION_ONLY, compile="auto"))
    for r in range(3):
        first.save(r)
        resumed.resume(r)
    assert resumed.compiling and [run.step for run in resumed.runs] == [10] * 3
    assert resumed.step_mode() == ("eager (cpu) + compiled (aot_eager); train.compile auto: compiled, as before "
                                   "its checkpoint")
    for _ in range(10):
        first.step()
        resumed.step()
    for a, b in zip(first.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)
    plain = group(Store(tmp_path / "plain"), configs(ATTENTION_ONLY, (0,)))
    plain.save(0)  # an eager run's checkpoint says eager: auto resumes it eagerly (as auto is on a CPU anyway)
    again = group(Store(tmp_path / "plain"), configs(ATTENTION_ONLY, (0,), compile="auto"))
    again.resume(0)
    assert not again.compiling and again.step_mode() == "eager (cpu)"


def test_runs_leaving_recompile_once_for_every_later_group_size(tmp_path, traced):
    """Static shapes first; when runs first leave, one recompile of each frame with the run axis dynamic (the
    parameters' too), which serves the next size without another: 4, then 3, then 2 runs compile each frame twice
    (past TorchDynamo's recompile limit a frame would run uncompiled, and a group of 256 runs leaving one by one
    would get there). The runs left train as the eager group's do."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # what compiled before (other sizes) would have made the run axis dynamic already
    model = {**ATTENTION_ONLY, "layers": 1}
    groups = {mode: group(Store(tmp_path / mode), configs(model, (0, 1, 2, 3), compile=mode))
              for mode in ("off", "on")}
    for g in groups.values():
        for _ in range(4):
            g.step()
    counters.clear()
    for g in groups.values():
        for step in range(8):
            if step in (0, 4):
                g.leave([1])
            g.step()
    assert counters["frames"]["ok"] == 3 and counters["aot_autograd"]["ok"] == 3, dict(counters["frames"])
    _close_but_the_key_bias(groups["off"], groups["on"])


def _close_but_the_key_bias(eager_group: engine.Group, compiled_group: engine.Group) -> None:
    eager = dict(eager_group.model.named_parameters())
    for name, b in compiled_group.model.named_parameters():
        # The key bias has no effect on the attention (softmax is shift-invariant): its gradient is zero up to
        # rounding, which AdamW normalises into steps of ±lr, so it drifts apart; nothing else reads it.
        if not name.endswith("attn.b_K"):
            torch.testing.assert_close(b, eager[name], rtol=1e-5, atol=1e-5, msg=name)
    torch.testing.assert_close(compiled_group.sums, eager_group.sums, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_the_compiled_optimizer_update_is_the_eager_one_run_by_run_in_float64(traced, kind):
    """The fused optimizer: ``GroupOptimizer.update`` compiled gives the eager update's weights and states for each
    run (float64, 1e-12: the traced lerp/addcdiv decompositions round in the last place), with per-run rates,
    warm-up, a cosine schedule, clipping and weight decay, through runs leaving the group (a recompile with the
    run axis dynamic)."""
    def made() -> tuple[list[torch.nn.Parameter], GroupOptimizer]:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(4, 3, 5, dtype=torch.float64)),
                  torch.nn.Parameter(torch.randn(4, 7, dtype=torch.float64))]
        return params, GroupOptimizer(params, [0.1, 0.03, 0.01, 0.003], kind, momentum=0.9, weight_decay=0.1,
                                      grad_clip=1.0, warmup_steps=3, schedule="cosine", total_steps=30)

    (eager_params, eager), (fused_params, fused) = made(), made()
    fused.compile("aot_eager")
    for step in range(20):
        if step == 10:  # runs 1 and 3 leave both groups
            keep = torch.tensor([0, 2])
            for params, opt in ((eager_params, eager), (fused_params, fused)):
                params[:] = [torch.nn.Parameter(p.detach()[keep]) for p in params]
                opt.select_runs(keep, params)
        for params, opt in ((eager_params, eager), (fused_params, fused)):
            opt.zero_grad()
            sum((p.pow(2) * (p.sin() + step)).sum() for p in params).backward()
            opt.step()
    for run in range(2):
        for a, b in zip(eager_params, fused_params, strict=True):
            torch.testing.assert_close(b[run], a[run], rtol=1e-12, atol=1e-12)
        for sa, sb in zip(eager.state, fused.state, strict=True):
            for name in sa:
                torch.testing.assert_close(sb[name][run], sa[name][run], rtol=1e-12, atol=1e-12)


def test_auto_on_a_cpu_is_off(tmp_path, traced):
    from torch._dynamo.utils import counters

    counters.clear()
    g = group(Store(tmp_path), configs(ATTENTION_ONLY, compile="auto"))
    for _ in range(3):
        g.step()
    assert g.step_mode() == "eager (cpu)" and not g.compiling and g.trial is None
    assert counters["frames"]["ok"] == 0


@pytest.mark.parametrize("eager_s, compiled_s, chosen", [(2.0, 1.0, "on"), (1.0, 3.0, "off")])
def test_auto_s_trial_times_each_captured_step_and_keeps_the_faster(monkeypatch, eager_s, compiled_s, chosen):
    """The trial's bookkeeping (``compile_choice.CompileTrial``), with a clock that advances by a step's time: warm-up
    steps are not timed, ``TRIAL_STEPS`` replays of the eager step are, then the switch to the compiled step, its
    replays, and the choice; a recapture mid-timing (runs left) times that mode again."""
    from depthlab.training import compile_choice

    now = [0.0]
    monkeypatch.setattr(compile_choice.time, "perf_counter", lambda: now[0])
    trial = compile_choice.CompileTrial(torch.device("cpu"), steps=4)

    def steps(replays: int, seconds: float, warmups: int) -> list[str | None]:
        switches = []
        for replaying in [False] * warmups + [True] * replays:
            trial.before(replaying)
            now[0] += seconds
            switches.append(trial.after(replaying))
        return switches

    assert steps(2, eager_s, warmups=4) == [None] * 6
    trial.restart()  # runs left: the eager step is captured again and timed from its next replay
    assert steps(4, eager_s, warmups=4) == [None] * 7 + ["on"]
    assert trial.chosen is None and trial.seconds == {"off": eager_s}
    assert steps(4, compiled_s, warmups=6) == [None] * 9 + [None if chosen == "on" else "off"]
    assert trial.chosen == chosen and trial.metrics() == {"step_ms_eager": eager_s * 1e3,
                                                          "step_ms_compiled": compiled_s * 1e3}
    assert trial.summary().startswith(f"train.compile auto chose {'compiled' if chosen == 'on' else 'eager'} (eager ")
    assert steps(3, 9.0, warmups=0) == [None] * 3  # chosen: nothing is timed any more


def test_a_compile_that_fails_falls_back_to_the_eager_step_and_says_why(tmp_path, monkeypatch):
    def broken(graph, inputs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(engine, "COMPILE_BACKEND", broken)
    torch._dynamo.reset()
    runs = configs(ATTENTION_ONLY, compile="on")
    fell_back, eager = group(Store(tmp_path / "a"), runs), group(Store(tmp_path / "b"), configs(ATTENTION_ONLY))
    for g in (fell_back, eager):
        for _ in range(5):
            g.step()
    torch._dynamo.reset()
    assert fell_back.step_mode().startswith("eager (cpu); compile given up: BackendCompilerFailed")
    assert "no compiler here" in fell_back.step_mode() and not fell_back.compiling
    for a, b in zip(eager.model.parameters(), fell_back.model.parameters(), strict=True):
        assert torch.equal(a, b)  # the failed step ran once, eagerly: nothing was applied twice
