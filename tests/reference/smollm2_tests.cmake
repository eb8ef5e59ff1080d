# pipefill against transformers on the real SmolLM2-135M-Instruct (tests/reference/smollm2_check.py).
# The model is fetched by scripts/get_model.sh into a cache outside the build tree, so that fresh
# clones (CI) reuse it: a no-op when it is there, a 93 MB download and ~30 s conversion when not.
# Paths are resolved when the tests run, as the scripts resolve them.
set(PF_SMOLLM2_DIR "\${PIPEFILL_CACHE:-\$HOME/.cache/pipefill}/models/smollm2-135m")

add_test(NAME setup.smollm2
         COMMAND bash -c "exec \"\$0\" smollm2-135m \"${PF_SMOLLM2_DIR}\"" ${CMAKE_SOURCE_DIR}/scripts/get_model.sh)
set_tests_properties(setup.smollm2 PROPERTIES FIXTURES_SETUP smollm2 FIXTURES_REQUIRED venv
                     LABELS "mpi;reference" TIMEOUT 600)

pf_venv_test(transformers.smollm2 smollm2_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/smollm2_check
             SHELL_ARG "${PF_SMOLLM2_DIR}")
set_tests_properties(transformers.smollm2 PROPERTIES FIXTURES_REQUIRED "venv;smollm2" LABELS "mpi;reference"
                     TIMEOUT 600 PROCESSORS 2)

# Decoding continues elsewhere: a --save-kv export loaded by scripts/pipefill_kv.py decodes
# transformers' own greedy tokens (SmolLM2 and a tiny Qwen3 with q/k norm; pp, tp, pp x tp).
pf_venv_test(transformers.kv_export_decode kv_export_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/kv_export_check
             SHELL_ARG "${PF_SMOLLM2_DIR}")
set_tests_properties(transformers.kv_export_decode PROPERTIES FIXTURES_REQUIRED "venv;smollm2"
                     LABELS "mpi;reference" TIMEOUT 600 PROCESSORS 2)

# --dtype bf16 on the cpu backend: closer to float64 than transformers' own bf16 on pp, tp and
# chunked layouts, and the KV pool halved (a prompt refused in float32 fits).
pf_venv_test(transformers.smollm2_bf16 bf16_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/bf16_check
             SHELL_ARG "${PF_SMOLLM2_DIR}")
set_tests_properties(transformers.smollm2_bf16 PROPERTIES FIXTURES_REQUIRED "venv;smollm2" LABELS "mpi;reference"
                     TIMEOUT 600 PROCESSORS 2)

# A --kv-store filled under one layout serves a run of another (pp 2 -> tp 3, pp 1 -> pp 3,
# tp 3 -> pp 2 x tp 3), against transformers and a fresh run of the new layout.
pf_venv_test(transformers.kv_store_layouts kv_layouts_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/kv_layouts_check
             SHELL_ARG "${PF_SMOLLM2_DIR}")
set_tests_properties(transformers.kv_store_layouts PROPERTIES FIXTURES_REQUIRED "venv;smollm2"
                     LABELS "mpi;reference" TIMEOUT 600 PROCESSORS 2)

# lm-evaluation-harness drives pipefill (scripts/lm_eval_pipefill.py): a long document with 8
# four-choice questions and rolling log-likelihoods through lm-eval's own command line, every
# request within 3e-4 of lm-eval's hf model (5e-5 a token for the rolling ones) and the same accuracy, on pp 2 and tp 3. lm-eval is
# installed into the venv on first use (scripts/setup_venv.sh --lm-eval, ~45 s cold).
add_test(NAME setup.lm_eval COMMAND ${CMAKE_SOURCE_DIR}/scripts/setup_venv.sh --lm-eval)
set_tests_properties(setup.lm_eval PROPERTIES FIXTURES_SETUP lm_eval FIXTURES_REQUIRED venv
                     LABELS "mpi;reference" TIMEOUT 900)
pf_venv_test(transformers.lm_eval lm_eval_check.py ${PF_BIN} ${CMAKE_CURRENT_BINARY_DIR}/lm_eval_check
             SHELL_ARG "${PF_SMOLLM2_DIR}")
set_tests_properties(transformers.lm_eval PROPERTIES FIXTURES_REQUIRED "venv;smollm2;lm_eval"
                     LABELS "mpi;reference" TIMEOUT 900 PROCESSORS 2)
