# pipefill against transformers itself (tests/reference/transformers_check.py), on tiny
# checkpoints that transformers 5 saves (rope_parameters layout). The Python environment
# (torch, transformers 5, ...) is made by scripts/setup_venv.sh outside the build tree, so
# that it survives fresh clones: a no-op when it exists, a long download when it does not.
add_test(NAME setup.venv COMMAND ${CMAKE_SOURCE_DIR}/scripts/setup_venv.sh)
set_tests_properties(setup.venv PROPERTIES FIXTURES_SETUP venv LABELS "mpi;reference" TIMEOUT 1200)

# The venv's location is resolved when the test runs, as setup_venv.sh resolves it.
add_test(NAME transformers.rope_parameters
         COMMAND bash -c "exec \"\${PIPEFILL_VENV:-\$HOME/.cache/pipefill/venv}/bin/python\" \"\$@\"" transformers_check
                 ${CMAKE_CURRENT_SOURCE_DIR}/reference/transformers_check.py ${PF_BIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/transformers_check)
set_tests_properties(transformers.rope_parameters PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 600 PROCESSORS 2)

# Every output (last logits, token log-probs, top-k, hidden states) on pp, tp, pp x tp and a
# dynamic plan, against transformers' forward: Llama GQA + llama3 scaling, Qwen2 biases in bf16
# files, Qwen3 q/k norm with tied embeddings.
add_test(NAME transformers.scores
         COMMAND bash -c "exec \"\${PIPEFILL_VENV:-\$HOME/.cache/pipefill/venv}/bin/python\" \"\$@\"" scores_check
                 ${CMAKE_CURRENT_SOURCE_DIR}/reference/scores_check.py ${PF_BIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/scores_check)
set_tests_properties(transformers.scores PROPERTIES FIXTURES_REQUIRED venv LABELS "mpi;reference"
                     TIMEOUT 600 PROCESSORS 2)
