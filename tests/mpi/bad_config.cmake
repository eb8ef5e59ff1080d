# Bad config.json values, cases of tests/mpi/bad_input.sh: one `error:` line naming the field,
# exit status 2, every file as it was, no hang. Uses the data fixtures of integration_tests.cmake.
set(PF_BAD_CONFIG_CASES
  rope_theta_zero rope_theta_negative rms_norm_eps_negative llama3_factor_zero
  hidden_size_2pow32_plus layers_2pow32_plus hidden_fractional max_position_negative
  rope_scaling_string optional_field_wrong_type unknown_rope_type_in_rope_parameters
  rope_layouts_disagree rope_scalings_disagree)
foreach(case ${PF_BAD_CONFIG_CASES})
  add_test(NAME bad_config.${case} COMMAND ${PF_MPI}/bad_input.sh ${PF_BIN} ${case} ${PF_DATA})
  set_tests_properties(bad_config.${case} PROPERTIES LABELS mpi TIMEOUT 120 FIXTURES_REQUIRED "model.tiny;prompts")
endforeach()
