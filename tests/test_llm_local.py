"""llm-bench on a local Hugging Face model: a tiny GPT-2 with random weights and a word-level tokenizer
trained here on the prompts' own vocabulary, saved to a folder and loaded the way a user's model is.

A model with random weights knows nothing about the questions, so its accuracy must be at chance level:
the chance level must lie inside the 95 % interval of the measured accuracy.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("depthlab") is None:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

torch = pytest.importorskip("torch")
# skipped without transformers and tokenizers, which the tests import where they use them, not at collection (2 s in
# every pytest-xdist worker)
pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(name) is None for name in ("transformers", "tokenizers")),
                                reason="transformers and tokenizers are not installed")

import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from depthlab.errors import UserError  # noqa: E402
from depthlab.llm.prompts import generate_many  # noqa: E402
from depthlab.llm.runners import HFRunner, Request  # noqa: E402
from depthlab.store import Store  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}[USER] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[BOT]{% endif %}"
)


def tiny_model(folder: Path, texts: list[str], chat_template: str | None = None) -> Path:
    """A 2-layer, width-32 GPT-2 with random weights and a WordLevel tokenizer trained on ``texts``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[EOS]", "[USER]", "[BOT]"]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=specials))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    if chat_template:
        fast.chat_template = chat_template
    torch.manual_seed(0)
    eos = fast.convert_tokens_to_ids("[EOS]")
    config = GPT2Config(vocab_size=len(fast), n_positions=512, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=eos, eos_token_id=eos, pad_token_id=fast.pad_token_id)  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture
def app() -> typer.Typer:
    from depthlab.cli import app

    return app


def test_random_tiny_model_scores_at_chance(app: typer.Typer, tmp_path: Path) -> None:
    texts = [p.prompt for d in (1, 2, 3) for p in generate_many("equations", 30, seed=0, depth=d)]
    texts += [p.prompt for p in generate_many("functions", 30, seed=0)]
    model = tiny_model(tmp_path / "tiny-gpt2", texts)
    store_root = tmp_path / "store"
    # one new token: a random model's reply is one word of the vocabulary, re-sampled until it is a
    # candidate (about 1 word in 9 is), so the accepted answers are the model's guesses.
    args = ["llm-bench", "--model", str(model), "--formulation", "equations", "--formulation", "functions",
            "--depth", "1-3", "-n", "10", "--max-tries", "60", "--max-new-tokens", "1", "--device", "cpu",
            "--seed", "1", "--store", str(store_root), "--markdown", str(tmp_path / "table.md"), "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    overall = out["overall"]
    assert out["questions"] == overall["n"] == 40
    assert out["runner"]["type"] == "hf" and out["runner"]["chat_template"] is False
    assert overall["chance"] == pytest.approx(0.25)
    assert overall["flagged"] <= 2
    assert overall["ci_low"] <= overall["chance"] <= overall["ci_high"], overall  # at chance level
    with Store(store_root) as store:
        records = store.records(out["run_id"])
    assert len(records) == 40
    answered = [r for r in records.values() if not r["flagged"]]
    assert all(r["answer"] in r["acceptable"] and r["replies"][-1].strip() == r["answer"] for r in answered)
    assert len({r["answer"] for r in answered}) > 1  # it guesses, it does not repeat one answer
    assert Path(out["figure"]).is_file()
    table = (tmp_path / "table.md").read_text().splitlines()
    assert table[0] == "**tiny-gpt2: seed 002 retrieval benchmark**"  # the folder's name, as the figure's title
    assert table[2] == "| formulation | D | n | acc % | 95% CI % | chance % | flagged | tries |"
    rows = [line.split(" | ") for line in table[4:]]
    assert [(r[0], r[1]) for r in rows] == [("| equations", d) for d in ("1", "2", "3", "all")] + [("| functions", "—")]
    first = next(c for c in out["cells"] if c["formulation"] == "equations" and c["depth"] == 1)
    assert rows[0][3] == f"{100 * first['accuracy']:.1f}"


def test_chat_template_batches_and_offline_errors(tmp_path: Path) -> None:
    texts = [p.prompt for p in generate_many("lives-with", 20, seed=0, depth=2)]
    model = tiny_model(tmp_path / "chat", texts, chat_template=CHAT_TEMPLATE)
    runner = HFRunner(str(model), max_new_tokens=3, batch_size=3, device="cpu")
    assert runner.chat
    shown = runner.text_for(texts[0])
    assert shown.startswith("[USER] ") and shown.endswith("[BOT]") and texts[0] in shown
    requests = [Request(t, 1.0 if i % 2 else 0.0, i) for i, t in enumerate(texts[:5])]
    replies = runner.generate(requests)
    assert len(replies) == 5 and all(isinstance(r.text, str) for r in replies)
    again = runner.generate(requests)
    assert [r.text for r in again] == [r.text for r in replies]  # seeded: the same replies again
    with pytest.raises(UserError, match="--model"):
        HFRunner(str(tmp_path / "no-such-model"))
    with pytest.raises(UserError, match="--model"):
        HFRunner("depthlab-test/no-such-model-anywhere")
