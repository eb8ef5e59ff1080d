# pipefill against transformers itself (tests/reference/transformers_check.py), on tiny
# checkpoints that transformers 5 saves (rope_parameters layout). The Python environment
# (torch, transformers 5, ...) is made by scripts/setup_venv.sh outside the build tree, so
# that it survives fresh clones: a no-op when it exists, a long download when it does not.
add_test(NAME setup.venv COMMAND ${CMAKE_SOURCE_DIR}/scripts/setup_venv.sh)
set_tests_properties(setup.venv PROPERTIES FIXTURES_SETUP venv LABELS "mpi;reference" TIMEOUT 1200)

# The venv's location is resolved when the test runs, as setup_venv.sh resolves it.
set(PF_VENV_PYTHON "\${PIPEFILL_VENV:-\$HOME/.cache/pipefill/venv}/bin/python")
# pf_venv_test(NAME SCRIPT [ARGS...] [SHELL_ARG WORD]): tests/reference/SCRIPT run by the venv's
# python with ARGS, then WORD, which the shell expands when the test runs (a path in the cache).
function(pf_venv_test name script)
  cmake_parse_arguments(PARSE_ARGV 2 PF "" "SHELL_ARG" "")
  set(tail "")
  if(DEFINED PF_SHELL_ARG)
    set(tail " \"${PF_SHELL_ARG}\"")
  endif()
  get_filename_component(argv0 ${script} NAME_WE)
  add_test(NAME ${name} COMMAND bash -c "exec \"${PF_VENV_PYTHON}\" \"\$@\"${tail}" ${argv0}
           ${CMAKE_CURRENT_SOURCE_DIR}/reference/${script} ${PF_UNPARSED_ARGUMENTS})
endfunction()

pf_venv_test(transformers.rope_parameters transformers_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/transformers_check)
set_tests_properties(transformers.rope_parameters PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 600 PROCESSORS 2)

# Every output (last logits, token log-probs, top-k, hidden states) on pp, tp, pp x tp and a
# dynamic plan, against transformers' forward: Llama GQA + llama3 scaling, Qwen2 biases in bf16
# files, Qwen3 q/k norm with tied embeddings.
pf_venv_test(transformers.scores scores_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/scores_check)
set_tests_properties(transformers.scores PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 600 PROCESSORS 2)

# Scored spans (/score_start, a context and its continuation) and prompt ids (/ids): the
# continuation's log-likelihood and is_greedy against transformers, with prefix reuse between
# prompts whose spans differ, on pp, tp, pp x tp, a dynamic plan and without reuse.
pf_venv_test(transformers.spans spans_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/spans_check)
set_tests_properties(transformers.spans PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 300 PROCESSORS 2)

# Mixture of experts (Qwen3-MoE, Mixtral, Qwen2-MoE) and DeepSeek-V3's latent attention, router
# and YaRN, on pp, tp, pp x tp and a dynamic plan, against transformers' forward; then bad
# configurations (too many experts per token, TP not dividing an expert, a missing expert, an
# unknown router or rope scaling) are refused with an error: line before any compute.
pf_venv_test(transformers.moe moe_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/moe_check)
set_tests_properties(transformers.moe PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 900 PROCESSORS 2)

# FP8 block-quantized checkpoints (F8_E4M3 weights + _scale_inv, quantization_config fp8): a tiny
# Qwen3 quantized in Python on pp, tp and pp x tp against transformers' forward of the
# dequantized weights, and the bad checkpoints refused (missing or misshapen scales, gptq).
pf_venv_test(transformers.fp8 fp8_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/fp8_check)
set_tests_properties(transformers.fp8 PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 300 PROCESSORS 2)

# scripts/pipefill_kv.py on a real --save-kv export of the tiny model (pp 2 x tp 2): it loads,
# with data_checksum recomputed as the C++ writer computes it; a file with a changed value or
# moved rows, and token ids that match only once cast to int32, are refused.
pf_venv_test(kv_export.python_loader kv_load_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/kv_load_check)
set_tests_properties(kv_export.python_loader PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 300 PROCESSORS 2)

# scripts/plot_timeline.py on a real run's output and --trace file (pp 2, --save-kv: the
# export's copies are events too), and its one-line refusals of anything else.
pf_venv_test(tools.plot_timeline plot_timeline_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/plot_timeline_check)
set_tests_properties(tools.plot_timeline PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 300 PROCESSORS 2)

# scripts/kv_store.py on a real --kv-store (pp 2): ls, du, verify (a changed value is found),
# gc (a damaged entry and a dead run's .incoming removed, the rest still lends).
pf_venv_test(tools.kv_store kv_store_tool_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/kv_store_tool_check)
set_tests_properties(tools.kv_store PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 300 PROCESSORS 2)
