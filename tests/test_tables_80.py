"""Tables that fit 80 columns when piped (issue 31): rich renders at 80 columns under ``| cat``; no line may be
wider and no number may be split over two lines (a name or a header may wrap). Seed 004's tables, from rows of
the widths a real run gives (no training)."""

from __future__ import annotations

import io

from rich.console import Console

from depthlab.cli.common import rich_table
from depthlab.induction.hypotheses import CapacityRow, capacity_table
from depthlab.induction.tables import RUN_MEASURES, runs_table

FAMILIES = ("seed 001 one-hot (softmax)", "GPT-style attention-only, d_model 64, 2 heads")


def rendered(table) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(rich_table(table))
    return out.getvalue().splitlines()


def numbers_whole(lines: list[str], cells: list[str]) -> bool:
    """Every cell of ``cells`` on some line in one piece."""
    return all(any(cell in line for line in lines) for cell in cells)


def test_the_seed004_induction_table_fits_80_columns_with_every_number_whole():
    rows = [{"model": family, "layers": layers, "accuracy": 0.997 - layers / 10, "mean_strength": -14.87 * layers,
             "median_strength": 18.52 * layers, "a_power_mean": 24.03, "b_power_mean": 23.98,
             "power_correlation": -0.18 if layers == 1 else None, "bleeding_rank1": 8.8, "bleeding_random": -0.16}
            for family in FAMILIES for layers in (1, 2)]
    table = runs_table(rows, "seed 004 induction with finite capacity (seed 004 Results 1 and 2)")
    lines = rendered(table)
    assert max(len(line) for line in lines) <= 80
    for name, _, _ in RUN_MEASURES:  # a measure's row on one line, its every number whole
        (line,) = [line for line in lines if line.lstrip("│ ").startswith(name)]
        row = next(r for r in table.rows if r[0] == name)
        assert all(cell in line for cell in row[1:]), (name, line)
    assert "—" in next(line for line in lines if "corr(A, B)" in line)  # a missing correlation said, not 0
    text = " ".join(" ".join(lines).split())
    assert "GPT-style" in text and "A (B) power: a token's mean strength" in text


def test_the_seed004_capacity_table_fits_80_columns_with_every_number_whole():
    stats = {"accuracy": 0.994, "median_strength": 25.4, "a_power_sd": 0.89, "b_power_sd": 0.95, "strength_b": 23.94,
             "neighbour_1": 8.8, "random": -0.16}
    rows = [CapacityRow(f"r{i}", width, width // heads, heads, words, stats)
            for i, (width, heads, words) in enumerate([(64, 2, 512), (128, 8, 2048), (512, 16, 16384)])]
    table = capacity_table(rows, "seed 004 hypotheses (seed 004 Hypotheses 1 and 2)")
    lines = rendered(table)
    assert max(len(line) for line in lines) <= 80
    for row in table.rows:
        assert any(all(cell in line for cell in row) for line in lines), row  # the run's row on one line
    assert numbers_whole(lines, ["16384", "0.994", "25.40", "-0.16"])


def test_a_length_table_of_four_lengths_with_searched_settings_fits_80_columns_and_loses_no_column():
    """Cells with a search's settings ("0.987 (lr 1e-03)") wrap between words; every column stays on screen."""
    from depthlab.analysis.lengths import length_table

    labels = {"TF-(1, 64)": "transformer", "LinTF-(2, 64)": "linear_transformer", "LSTM-(1, 128)": "lstm"}
    rows = [{"task_label": "index_lookup", "label": label, "model": model, "length": n, "accuracy": 0.5 + n / 1000,
             "seeds": 3, "tried": 2, "settings": {"train.lr": 0.001}, "state_size": 123456, "chance": 1 / 64,
             "eval_protocol": "fresh strings", "eval_examples": 1000}
            for label, model in labels.items() for n in (20, 50, 100, 200)]
    lines = rendered(length_table(rows, "seed 003 index lookup (seed 003 Figure 2)"))
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert all(text.count(f"{0.5 + n / 1000:.3f}") == 3 for n in (20, 50, 100, 200))  # every accuracy whole
    assert text.count("0.016") == 3 and "N=200" in text and text.count("123,456") == 3  # the last columns shown


def test_a_length_table_keeps_names_on_one_line_where_they_fit():
    """seed003-equality at quick scale: three tasks, four lengths. At 80 columns "LSTM-(1," was split from "64)" and
    "eq_random" folded; the names now stay whole, the state-size column wraps instead."""
    from depthlab.analysis.lengths import length_table

    rows = [{"task_label": task, "label": label, "model": label, "length": n, "accuracy": 0.75, "seeds": 1,
             "tried": 1, "settings": {}, "state_size": 12800, "chance": 0.5, "eval_protocol": "fresh strings",
             "eval_examples": 1000}
            for task, lengths in (("eq_random", (20, 50)), ("eq_one", (20, 50)), ("eq_ncp", (16, 32)))
            for label in ("TF-(2, 64)", "LSTM-(1, 64)", "DSS-(2, 64)", "Mamba-(1, 64)") for n in lengths]
    lines = rendered(length_table(rows, "seed 003 string equality across lengths (seed 003 Figure 4)"))
    assert max(len(line) for line in lines) <= 80
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == 12  # one line per row: nothing wrapped
    assert all("eq_" in line and "-(" in line and ", 64)" in line for line in body)
    assert sum(line.count("0.750") for line in body) == 24 and sum(line.count("0.500") for line in body) == 12


def test_the_heads_table_of_seed001_has_one_line_per_cell_at_80_columns():
    """seed001-heads: "Figure 6: template matching" took three lines and every head list had room to spare."""
    from depthlab.analysis.heads import heads_table

    panels = {"Figure 4: memorization": ["[1]", "[8]"], "Figure 6: template matching": ["[1, 4]", "[4, 4]"],
              "Figure 7: IC-TM k=2": ["[1, 1, 6]", "[1, 1, 1, 1]"]}
    rows = [{"panel": panel, "heads": heads, "accuracy": 0.985, "accuracy_sd": 0.021, "seeds": 3, "steps_to": 2750,
             "chance": 0.5} for panel, lists in panels.items() for heads in lists]
    lines = rendered(heads_table(rows, "training dynamics for different attention heads (seed 001 Figures 4-7)"))
    assert max(len(line) for line in lines) <= 80
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == 6 and all("0.985 ± 0.021" in line and "2750" in line for line in body)
    assert sum("Figure 6: template matching" in line for line in body) == 2


def test_emergence_and_circuit_paths_stay_on_one_line_at_80_columns():
    """seed002-emergence and -circuits: "second of pair 2 → first of pair 2" took three lines beside wide number
    columns."""
    from depthlab.analysis.circuits import circuits_table
    from depthlab.analysis.emergence import emergence_table

    path = "second of pair 2 → first of pair 2"
    emergence = {"paths": [{"path": f"2.0 {path}", "first_step_above": 1345, "settled_step_above": 1345,
                            "final_attention": 0.98}], "partial_first_step_below": {"x1": 235}}
    circuits = [{"name": "A", "seed": 0, "intact_loss": 0.265, "circuit_loss": 0.566, "heads_used": 2,
                 "paths": [{"layer": 2, "head": 0, "from": "second of pair 2", "to": "first of pair 2",
                            "attention": 0.97, "loss_without": 1.076}]}]
    for table in (emergence_table(emergence, "seed 002 emergence"), circuits_table(circuits, "seed 002 circuits")):
        lines = rendered(table)
        assert max(len(line) for line in lines) <= 80
        assert sum(path in line for line in lines) == 1, "\n".join(lines)
    assert any("A (seed 0)" in line and "MSE 0.265, circuit 0.566, 2 heads" in line for line in lines)


def test_names_stay_whole_where_the_table_fits_and_only_headers_fold():
    """`depthlab runs` on seed001-heads' store: "memoriza" over "tion" and "attentio" over "n_only" on every row.
    Names now stay whole where the table's cells fit (only a header folds), and fold where even that does not."""
    from depthlab.analysis.tables import Column, Table

    def listing(task: str) -> Table:
        table = Table([Column("id", no_wrap=True), Column("task", no_wrap=True), Column("model", no_wrap=True),
                       Column("layers", "right"), Column("heads", "right"), Column("k", "right"),
                       Column("seed", "right"), Column("status"), Column("step", "right"),
                       Column("accuracy", "right", no_wrap=True)], compact=True)
        for heads in ("[1]", "[1, 1, 1, 1]"):
            table.add_row("1452ec30", task, "attention_only", "1", heads, "—", "0", "done", "1500", "1.000")
        return table

    lines = rendered(listing("memorization"))
    rows = [line for line in lines if "1452ec30" in line]
    assert max(map(len, lines)) <= 80 and len(rows) == 2
    assert all(" memorization " in line and " attention_only " in line and "1.000" in line for line in rows)
    lines = rendered(listing("a_task_name_far_too_long_to_fit_on_one_line_of_this_table_beside_the_rest"))
    assert max(map(len, lines)) <= 80 and sum("1.000" in line for line in lines) == 2  # folded, nothing cropped


def test_a_listing_that_fits_with_one_space_between_columns_keeps_every_header_whole():
    """`depthlab runs` on seed 003's index-lookup store printed "lay"/"ers", "see"/"d" and "stat"/"us": at two
    spaces between columns its headers' words did not fit 80 columns; at one space they do."""
    from depthlab.analysis.tables import Column, Table

    table = Table([Column("id", no_wrap=True), Column("task", no_wrap=True), Column("model", no_wrap=True),
                   Column("layers", "right"), Column("N", "right"), Column("seed", "right"), Column("status"),
                   Column("step", "right"), Column("accuracy", "right", no_wrap=True)], compact=True)
    for model in ("transformer", "attention_only"):
        table.add_row("cdbdf9b7", "index_lookup", model, "1", "100", "0", "done", "2000", "0.987")
    lines = rendered(table)
    assert max(map(len, lines)) <= 80
    (header,) = [line for line in lines if " id " in f" {line} "]
    assert header.split() == ["id", "task", "model", "layers", "N", "seed", "status", "step", "accuracy"]
    assert sum(" attention_only " in line and " 0.987" in line for line in lines) == 1


def test_a_layers_table_never_splits_a_chain_position_from_its_partial_loss_at_80_columns():
    """seed002-layers at medium scale (3 seeds, x1-x3) printed "x1 0.748  x2" on one line and "0.749  x3 0.751" on
    the next."""
    from depthlab.analysis.layers import layers_table

    rows = [{"formulation": f, "variant": "", "D": 3, "layers": n, "loss": 0.749, "seed_losses": [0.749, 0.75, 0.503],
             "partial_names": ["x1", "x2", "x3"] if f == "ic" else ["x3"],
             "partial_losses": [0.748, 0.749, 0.751] if f == "ic" else [0.751]}
            for f in ("ic", "non_ic") for n in (1, 6)]
    lines = rendered(layers_table(rows, "seed 002 depth study (retrieval, IC vs non-IC) (seed 002 Figure 4)"))
    assert max(map(len, lines)) <= 80
    for cell in ("x1=0.748", "x2=0.749", "x3=0.751", "0.749", "0.503"):
        assert any(cell in line for line in lines), cell


def test_a_narrow_tables_title_and_caption_wrap_at_80_columns_not_at_its_width():
    """The kv_recall minimum-depth table is 42 columns wide: its caption took five lines of 42."""
    from depthlab.analysis.tables import Column, Table

    caption = ("min: the minimum depth (>L: no depth up to L reached the target); columns 1–2: layers, each cell "
               "the mean accuracy over seeds (seeds at the target); chance 0.125; evaluated on kv_recall: fresh sample")
    table = Table([Column("task", no_wrap=True), Column("min", "right")], compact=True, caption=caption,
                  title="minimum depth — kv_recall (attention_only) (target 0.95, strict majority of seeds)")
    table.add_row("kv_recall", "2")
    lines = [line.rstrip() for line in rendered(table)]
    assert max(map(len, lines)) <= 80
    assert len([line for line in lines if line]) == 2 + 3 + 3  # title, header and rule and row, caption
    assert " ".join(" ".join(lines).split()).endswith(caption)


def test_a_length_table_says_how_many_seeds_each_mean_is_over():
    """seed003-dyck trains Mamba with one seed, the others with three: "mean over 1 or 3 seeds" (not "1/3")."""
    from depthlab.analysis.lengths import length_table

    rows = [{"task_label": "dyck", "label": label, "model": label, "length": 20, "accuracy": 0.9, "seeds": seeds,
             "tried": 1, "settings": {}, "state_size": 10, "chance": 0.5, "eval_protocol": "fresh strings",
             "eval_examples": 1000} for label, seeds in (("lstm", 3), ("mamba", 1))]
    text = " ".join(" ".join(rendered(length_table(rows, "seed 003 Dyck"))).split())
    assert "mean over 1 or 3 seeds" in text, text


def test_a_minimum_depth_table_of_four_depths_fits_80_columns_with_names_and_numbers_whole():
    """seed002-min-depth's table: six values of D, four depths, the bound beside each row."""
    from depthlab.analysis.capability import min_depth_table, with_retrieval_bound
    from depthlab.sweeps.climb import CellResult

    cells = [CellResult("retrieval", None, "task.D", d, 4, 0.95, chance=0.5,
                        eval_protocol="exhaustive dataset when small, else a fresh sample",
                        accuracies={layers: [0.289 + d / 100, 0.5, 0.501] for layers in range(1, 5)},
                        min_layers=2 if d == 1 else None) for d in range(1, 7)]
    table = min_depth_table(with_retrieval_bound(cells), "seed 002 minimum depth of retrieval (seed 002 Theorem 1)",
                            expected_label="⌈log3(2D)⌉")
    lines = rendered(table)
    assert max(len(line) for line in lines) <= 80
    for d in range(1, 7):  # the row's name, verdict and bound on one line; every accuracy whole
        (line,) = [line for line in lines if f"retrieval, D={d} " in line]
        assert line.split()[2:4] == ["2" if d == 1 else ">4", str(with_retrieval_bound(cells)[d - 1].expected)]
    means = [f"{(0.289 + d / 100 + 0.5 + 0.501) / 3:.3f}" for d in range(1, 7)]
    assert numbers_whole(lines, [*means, "(0/3)"])
    text = " ".join(" ".join(lines).split())
    assert "min: the minimum depth (>L: no depth up to L reached the target); columns 1–4: layers" in text
    assert "chance 0.500" in text  # one chance for every row: said once
    header = next(line for line in lines if line.split()[:2] == ["task", "min"])
    assert header.split()[2:] == ["⌈log3(2D)⌉", "1", "2", "3", "4"]  # no header word split


def test_text_in_square_brackets_is_printed_as_written_not_read_as_rich_markup():
    """Index lookup's protocol says "training lengths uniform in [min_length, N]": rich took the brackets for a
    markup tag and printed "uniform in " — tables are data, shown as written."""
    from depthlab.analysis.tables import Table

    table = Table.of("task", "[bold]", title="[red]title", caption="lengths uniform in [min_length, N]")
    table.add_row("[min_length, N]", "[/]")
    text = " ".join(" ".join(rendered(table)).split())
    assert all(s in text for s in ("[red]title", "[bold]", "[min_length, N]", "[/]", "uniform in [min_length, N]"))


def test_a_length_table_too_wide_for_its_frame_drops_the_frame_before_folding_a_name():
    """seed003-equality at medium scale: three tasks, six lengths (N = 16-100). Framed at 80 columns, "eq_random"
    folded to "eq_ra"/"ndom" and each row took three lines; unframed, each row keeps one line and every name whole."""
    from depthlab.analysis.lengths import length_table

    rows = [{"task_label": task, "label": label, "model": label, "length": n, "accuracy": 0.865, "seeds": 1,
             "tried": 1, "settings": {}, "state_size": 25600, "chance": 0.5, "eval_protocol": "fresh strings",
             "eval_examples": 1000}
            for task, lengths in (("eq_random", (20, 50, 100)), ("eq_one", (20, 50, 100)), ("eq_ncp", (16, 32, 64)))
            for label in ("TF-(2, 64)", "LSTM-(1, 64)", "DSS-(2, 64)", "Mamba-(1, 64)") for n in lengths]
    lines = rendered(length_table(rows, "seed 003 string equality across lengths (seed 003 Figure 4)"))
    assert max(len(line) for line in lines) <= 80
    body = [line for line in lines if line.lstrip().startswith("eq_")]
    assert len(body) == 12 and not any("│" in line for line in lines)
    assert all(("eq_random" in line or "eq_one" in line or "eq_ncp" in line) and "-(" in line for line in body)
    assert sum(line.count("0.865") for line in body) == 36
    assert "N=16" in lines[1] + lines[2] + lines[3] and any("N=100" in line for line in lines)


def test_a_listing_too_wide_for_every_layout_folds_a_header_and_crops_no_column():
    """`depthlab runs` on seed002-layers' medium store (settings D and target, "interrupted" runs): no layout fitted
    80 columns, rich shrank what it could and cropped the rest — the last column's header read "accura" and its
    cells ("—") were gone. Every cell is now on its row's line and every header is there, folded where it must."""
    from depthlab.analysis.tables import Column, Table

    table = Table([Column("id", no_wrap=True), Column("task", no_wrap=True), Column("model", no_wrap=True),
                   Column("layers", "right"), Column("D", "right"), Column("target", "right"), Column("seed", "right"),
                   Column("status"), Column("step", "right"), Column("accuracy", "right", no_wrap=True)],
                  compact=True)
    rows = [("bc196c0b", "retrieval_vec", "transformer", "1", "3", "non_ic", "0", "interrupted", "5000", "—"),
            ("d02fde5a", "retrieval_vec", "transformer", "3", "5", "ic", "2", "done", "572", "0.0261")]
    for row in rows:
        table.add_row(*row)
    lines = rendered(table)
    assert max(map(len, lines)) <= 80
    for row in rows:
        (line,) = [line for line in lines if row[0] in line]
        assert line.split() == list(row)
    head = lines[: next(i for i, line in enumerate(lines) if "─" in line)]  # every header's every letter
    assert sorted("".join(head).replace(" ", "")) == sorted("".join(c.header for c in table.columns))
