# Text in: scripts/tokenize.py and scripts/detokenize.py against transformers' tokenizer, on a
# tokenizer trained inside the test (tests/reference/tokenize_check.py), and `pipefill run` on
# the file they write. Needs the venv of scripts/setup_venv.sh (fixture `venv`, as the
# transformers cases) and the pipefill binary.
pf_venv_test(tokenize.text_in tokenize_check.py ${CMAKE_SOURCE_DIR} ${PF_BIN}
             ${CMAKE_CURRENT_BINARY_DIR}/tokenize_check)
set_tests_properties(tokenize.text_in PROPERTIES FIXTURES_REQUIRED venv LABELS reference TIMEOUT 300)
