"""Shared test setup: Triton runs in its CPU interpreter, and generated kernels go to a per-session cache.

Both variables are set at import, before any test module imports triton (the interpreter flag is read when
triton.jit decorates a function) or fusionsearch writes a kernel (it would otherwise use ~/.cache)."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ["TRITON_INTERPRET"] = "1"
_CACHE_DIR = tempfile.mkdtemp(prefix="fusionsearch-tests-")
os.environ["FUSIONSEARCH_CACHE_DIR"] = _CACHE_DIR


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _analytic_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package ships a learned model for the H200, and the model backend prices plans as an H200; tests
    that compare against analytic figures would silently use it. Tests of the shipped model read
    SHIPPED_MODEL_PATH explicitly. The search and learned.load_default both read this one setting (and worker
    processes inherit it with the environment)."""
    monkeypatch.setenv("FUSIONSEARCH_MODEL", os.path.join(_CACHE_DIR, "no-shipped-model.skops"))


def _postgres_database() -> str:
    """A fresh database on the server .ci/run starts (URL in $FUSIONSEARCH_TEST_POSTGRES), so that every test
    sees an empty storage; skipped without a server, failed instead where CI requires one."""
    import uuid

    url = os.environ.get("FUSIONSEARCH_TEST_POSTGRES")
    if not url:
        if os.environ.get("FUSIONSEARCH_REQUIRE_POSTGRES"):
            pytest.fail("FUSIONSEARCH_REQUIRE_POSTGRES is set but FUSIONSEARCH_TEST_POSTGRES (the server URL) is not")
        pytest.skip("no PostgreSQL server: set FUSIONSEARCH_TEST_POSTGRES=postgresql://... (.ci/run starts one)")
    import psycopg

    name = f"fs_{uuid.uuid4().hex[:16]}"
    base, _, _ = url.rpartition("/")
    with psycopg.connect(url, autocommit=True) as conn:  # CREATE DATABASE cannot run inside a transaction
        conn.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"


@pytest.fixture
def storage_url(tmp_path: object) -> object:
    """storage_url(kind) -> an empty storage of that kind: a SQLite file, a journal file, or a PostgreSQL
    database of its own."""
    from pathlib import Path

    def make(kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{Path(str(tmp_path)) / 's.db'}"
        if kind == "journal":
            return f"journal:{Path(str(tmp_path)) / 'j.log'}"
        assert kind == "postgres", kind
        return _postgres_database()

    return make


# The slow tests (issue 55): the README's first test command leaves them out (`-m "not slow"` in pyproject's
# addopts), its second runs only them (`-m slow`), and .ci/run runs both. Whole files first, then single tests
# (each with every parameter), each with why it is slow. tests/test_slow_list.py holds every entry to a test that
# exists. Run a slow test by name with `-m ""` (or `-m slow`).
SLOW_FILES = {
    "tests/costmodel/test_learned.py": "trains the learned model on the shipped datasets, several times",
    "tests/costmodel/test_refit.py": "fits models and runs a measured search in worker processes",
    "tests/costmodel/test_shipped_model.py": "reads, featurizes and scores the whole shipped datasets",
    "tests/costmodel/test_pooled.py": "trains pooled models over both GPUs' datasets",
    "tests/property/test_every_plan_validates.py": "hundreds of drawn plans, each generated and run in the interpreter",
    "tests/search/test_collect.py": "collections through worker processes, some killed and resumed",
}
SLOW_TESTS = {
    "tests/kinds/test_decode_gemv.py::test_gemv_plans_match_float64":
        "every suite decode row through every gemv config in the interpreter (gpt-fast's linear stays in the first)",
    "tests/costmodel/test_compiled_features.py::test_cross_validation_reports_the_model_with_and_without_compiled_figures":
        "fits forests with and without the compiled features",
    "tests/search/test_measure_few.py::test_the_bound_is_an_option_and_applies_only_where_a_learned_model_ranks_measured_plans":
        "fits a learned model and runs a measured search",
    "tests/search/test_study.py::test_a_search_of_a_huge_total_lays_out_a_bounded_number_of_slots":
        "lays out slots of a huge study",
    "tests/benchmarks/test_measure_few_gpu.py::test_a_dry_run_writes_the_curves_the_table_and_the_chart":
        "a dry run of a GPU script end to end",
    "tests/codegen/test_fp32_dot.py::test_on_sm_90_the_tensor_core_forms_have_a_shorter_k_loop":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_index_checks.py::test_an_expert_index_out_of_range_is_refused_by_every_moe_kind":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_index_checks.py::test_an_exported_plan_refuses_an_out_of_range_index_without_fusionsearch":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_index_checks.py::test_an_out_of_range_gather_index_is_refused_in_one_line_never_read":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_new_workloads.py::test_reference_plans_match_float64_in_the_interpreter":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_resources.py::test_a_config_beyond_the_shared_memory_shows_it":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_resources.py::test_an_fp32_accumulator_too_big_for_registers_spills_and_a_small_one_does_not":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_resources.py::test_many_plans_are_compiled_in_worker_processes_like_one_at_a_time":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_workloads_interpreter.py::test_fully_fused_plans_validate_under_every_tile_config":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/codegen/test_workloads_interpreter.py::test_mixed_plans_validate":
        "whole workloads through every plan or config in the interpreter, or a compile per plan",
    "tests/costmodel/test_compiled_features.py::test_add_resources_compiles_each_template_of_an_older_dataset":
        "fits and converts forests",
    "tests/costmodel/test_trees.py::test_trees_predict_exactly_as_the_regressor_on_random_data_with_missing_values":
        "fits and converts forests",
    "tests/datasets/test_model_families.py::test_real_graphs_of_the_new_families_fit_the_budgets_and_are_searchable":
        "real-sized graphs of every family through the interpreter",
    "tests/datasets/test_model_families.py::test_unfused_and_fully_fused_plans_match_float64_in_the_interpreter":
        "real-sized graphs of every family through the interpreter",
    "tests/dynamo/test_backend.py::test_a_second_process_loads_the_plan_instead_of_searching":
        "a model through torch.compile and the backend, Inductor compiling on the CPU",
    "tests/dynamo/test_backend.py::test_inductor_compiles_the_graph_around_the_tuned_regions":
        "a model through torch.compile and the backend, Inductor compiling on the CPU",
    "tests/dynamo/test_backend.py::test_tune_model_fills_the_plan_cache_that_torch_compile_then_reads":
        "a model through torch.compile and the backend, Inductor compiling on the CPU",
    "tests/dynamo/test_models.py::test_a_gpt_fast_decoder_writes_its_kv_cache_and_matches_eager_step_by_step":
        "a model through torch.compile and the backend, Inductor compiling on the CPU",
    "tests/dynamo/test_models.py::test_inductor_compiles_a_decoder_step_around_the_regions_and_writes_the_kv_cache_in_place":
        "a model through torch.compile and the backend, Inductor compiling on the CPU",
    "tests/dynamo/test_transformers.py::test_a_transformers_decoder_with_a_static_cache_compiles_fullgraph_and_matches_eager":
        "a model through torch.compile and the backend, Inductor compiling on the CPU",
    "tests/graph/test_extern_fake.py::test_a_factory_extern_allocates_nothing_at_load":
        "a fresh Python process per hostile spec",
    "tests/graph/test_extern_fake.py::test_an_extern_refusing_its_inputs_is_one_line_without_torchs_logged_traceback":
        "a fresh Python process per hostile spec",
    "tests/graph/test_extern_fake.py::test_an_extern_target_is_looked_up_never_called_so_a_hostile_spec_cannot_change_torch":
        "a fresh Python process per hostile spec",
    "tests/graph/test_long_chain.py::test_plan_stages_do_not_recurse":
        "a fresh Python process per hostile spec",
    "tests/kinds/test_decode_words.py::test_random_int4_graphs_through_random_words_configs_match_float64":
        "random graphs or SASS listings through many configs",
    "tests/kinds/test_decode_words.py::test_the_words_k_loop_runs_fewer_instructions_a_weight_element_on_sm90":
        "random graphs or SASS listings through many configs",
    "tests/kinds/test_grouped_matmul.py::test_choosing_the_grouped_kind_fuses_its_expert_gather_so_no_draw_is_illegal":
        "random graphs or SASS listings through many configs",
    "tests/kinds/test_stack.py::test_with_constant_shifts_the_dot_operand_stays_in_registers_on_sm90":
        "random graphs or SASS listings through many configs",
    "tests/measure/test_isolate.py::test_a_hanging_plan_times_out_and_the_worker_is_replaced":
        "worker processes started, crashed, hung and replaced",
    "tests/measure/test_isolate.py::test_a_search_measuring_through_a_crashing_worker_completes_every_trial":
        "worker processes started, crashed, hung and replaced",
    "tests/measure/test_isolate.py::test_a_segfaulting_plan_fails_alone_and_the_next_plan_gets_a_fresh_worker":
        "worker processes started, crashed, hung and replaced",
    "tests/measure/test_isolate.py::test_a_worker_that_cannot_set_up_raises_a_measure_error":
        "worker processes started, crashed, hung and replaced",
    "tests/measure/test_isolate.py::test_a_worker_that_exits_or_raises":
        "worker processes started, crashed, hung and replaced",
    "tests/measure/test_isolate.py::test_the_real_judge_validates_in_the_worker_against_the_float64_reference":
        "worker processes started, crashed, hung and replaced",
    "tests/measure/test_isolate.py::test_the_search_inputs_cross_to_the_worker":
        "worker processes started, crashed, hung and replaced",
    "tests/measure/test_isolate.py::test_workers_start_from_a_script_without_a_main_guard_read_from_stdin":
        "worker processes started, crashed, hung and replaced",
    "tests/property/test_fuzz.py::test_fuzzed_model_files_and_plan_cache_entries_load_or_are_refused_in_one_line":
        "2,300 fuzzed files",
    "tests/search/test_library.py::test_the_learned_model_prices_library_matmuls_by_the_analytic_figure":
        "a search in a fresh process",
    "tests/search/test_study.py::test_a_journal_worker_sigkilled_mid_trial_is_recovered_by_the_others":
        "several worker processes on one storage, some killed",
    "tests/search/test_study.py::test_a_resumed_study_reruns_the_trial_of_a_sigkilled_worker":
        "several worker processes on one storage, some killed",
    "tests/search/test_study.py::test_a_worker_killed_right_after_its_claim_loses_nothing":
        "several worker processes on one storage, some killed",
    "tests/search/test_study.py::test_three_workers_on_one_storage_run_exactly_the_total":
        "several worker processes on one storage, some killed",
    "tests/search/test_study.py::test_workers_laying_out_slots_as_they_go_run_exactly_the_total":
        "several worker processes on one storage, some killed",
    "tests/search/test_tune_api.py::test_tune_after_triton_was_imported_for_a_gpu_says_what_to_do":
        "a search in a fresh process",
    "tests/search/test_tune_api.py::test_tune_of_a_function_on_a_cpu_without_triton_interpret":
        "a search in a fresh process",
    "tests/search/test_workers.py::test_a_killed_parent_leaves_no_worker_file_and_no_storage_url_on_disk":
        "several worker processes on one storage, some killed",
    "tests/search/test_workers.py::test_a_worker_killed_mid_trial_loses_nothing":
        "several worker processes on one storage, some killed",
    "tests/search/test_workers.py::test_the_cli_runs_two_workers_and_reports_them_together":
        "several worker processes on one storage, some killed",
    "tests/search/test_workers.py::test_three_workers_run_exactly_the_trials_of_the_study":
        "several worker processes on one storage, some killed",
    "tests/test_cli_interpreter.py::test_an_extern_softmax_after_a_matmul_searches_and_runs_without_triton_interpret":
        "the CLI in a fresh process, searching",
    "tests/test_cli_tools.py::test_run_and_explain_of_a_decode_plan_in_a_fresh_process":
        "the CLI in a fresh process, searching",
    "tests/test_cli_tools.py::test_run_checks_a_bf16_plan_whose_values_pass_float16s_range":
        "the CLI in a fresh process, searching",
    "tests/test_cli_tools.py::test_run_in_a_fresh_process_switches_the_interpreter_on_itself":
        "the CLI in a fresh process, searching",
    "tests/test_cli_tools.py::test_studies_lists_each_study_with_its_graph_trials_and_best":
        "the CLI in a fresh process, searching",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::")[0] in SLOW_FILES or item.nodeid.split("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
