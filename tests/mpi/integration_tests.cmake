# MPI integration: every configuration must reproduce the float64 reference logits (and
# the numpy Hugging Face reference) within 1e-4 relative error. Models and prompts are
# made once by fixtures; each case is one `mpirun`.
set(PF_DATA ${CMAKE_CURRENT_BINARY_DIR}/data)
set(PF_MPI ${CMAKE_CURRENT_SOURCE_DIR}/mpi)
set(PF_PY /usr/bin/python3)
set(PF_BIN ${CMAKE_BINARY_DIR})

add_test(NAME setup.data COMMAND ${CMAKE_COMMAND} -E make_directory ${PF_DATA})
set_tests_properties(setup.data PROPERTIES FIXTURES_SETUP data LABELS mpi)

# Models: tiny (single f32 file), tiny-qwen2 (sharded bf16), tiny-qwen3 (bf16).
add_test(NAME setup.model.tiny COMMAND pipefill make-model --preset tiny --out ${PF_DATA}/tiny --overwrite)
add_test(NAME setup.model.qwen2 COMMAND pipefill make-model --preset tiny-qwen2 --out ${PF_DATA}/qwen2 --dtype bf16 --max-shard-mb 1 --seed 7 --overwrite)
add_test(NAME setup.model.qwen3 COMMAND pipefill make-model --preset tiny-qwen3 --out ${PF_DATA}/qwen3 --dtype bf16 --seed 9 --overwrite)
add_test(NAME setup.prompts COMMAND pipefill make-prompts --out ${PF_DATA}/prompts.h5 --num 4 --min-len 20 --max-len 300 --vocab 512 --seed 3)
foreach(name model.tiny model.qwen2 model.qwen3 prompts)
  set_tests_properties(setup.${name} PROPERTIES FIXTURES_SETUP ${name} FIXTURES_REQUIRED data LABELS mpi)
endforeach()

# References, float64 C++ and numpy, for each model.
foreach(model tiny qwen2 qwen3)
  add_test(NAME setup.reference.${model}
           COMMAND pipefill_reference --model ${PF_DATA}/${model} --input ${PF_DATA}/prompts.h5 --output ${PF_DATA}/ref_${model}.h5)
  add_test(NAME setup.numpy.${model}
           COMMAND ${PF_PY} ${CMAKE_CURRENT_SOURCE_DIR}/reference/numpy_reference.py ${PF_DATA}/${model} ${PF_DATA}/prompts.h5 ${PF_DATA}/np_${model}.h5 --top-k 5)
  set_tests_properties(setup.reference.${model} setup.numpy.${model} PROPERTIES
                       FIXTURES_REQUIRED "model.${model};prompts" LABELS mpi)
  set_tests_properties(setup.reference.${model} PROPERTIES FIXTURES_SETUP reference.${model})
  set_tests_properties(setup.numpy.${model} PROPERTIES FIXTURES_SETUP numpy.${model})
endforeach()

# The two references agree with each other (independent code paths).
foreach(model tiny qwen2 qwen3)
  add_test(NAME reference.agree.${model} COMMAND compare_logits ${PF_DATA}/np_${model}.h5 ${PF_DATA}/ref_${model}.h5 --rtol 1e-4)
  set_tests_properties(reference.agree.${model} PROPERTIES FIXTURES_REQUIRED "reference.${model};numpy.${model}" LABELS mpi)
endforeach()

# pf_mpi_case(NAME MODEL RANKS run-args...): run and compare with both references of MODEL.
function(pf_mpi_case name model ranks)
  set(model_flag ${PF_DATA}/${model})
  if(model STREQUAL "synthetic-tiny")
    set(model_flag synthetic:tiny)
    set(model tiny)  # synthetic:tiny with seed 0 is exactly make-model --preset tiny
  endif()
  add_test(NAME mpi.${name}
           COMMAND ${PF_MPI}/run_and_compare.sh ${PF_BIN} ${ranks} ${PF_DATA}/out_${name}.h5
                   "${PF_DATA}/ref_${model}.h5 ${PF_DATA}/np_${model}.h5"
                   -- --model ${model_flag} --input ${PF_DATA}/prompts.h5 ${ARGN})
  set_tests_properties(mpi.${name} PROPERTIES LABELS mpi PROCESSORS ${ranks}
                       FIXTURES_REQUIRED "reference.${model};numpy.${model};prompts" TIMEOUT 300)
endfunction()

# The tiny configurations run twice: from the make-model directory and from synthetic:tiny.
foreach(source tiny synthetic-tiny)
  pf_mpi_case(${source}.pp1_tp1_unchunked ${source} 1 --pp 1 --tp 1 --chunk-size 100000)
  pf_mpi_case(${source}.pp2_tp1 ${source} 2 --pp 2 --tp 1 --chunk-size 64)
  pf_mpi_case(${source}.pp1_tp2 ${source} 2 --pp 1 --tp 2 --chunk-size 64)
  pf_mpi_case(${source}.pp2_tp2 ${source} 4 --pp 2 --tp 2 --chunk-size 64)
  pf_mpi_case(${source}.pp4_tp2_chunk64_page16 ${source} 8 --pp 4 --tp 2 --chunk-size 64 --page-size 16)
  pf_mpi_case(${source}.pp3_uneven_2_4_2 ${source} 3 --pp 3 --chunk-size 50 --page-size 16 --layer-partition 2,4,2)
  pf_mpi_case(${source}.pp2_page64_chunk100 ${source} 2 --pp 2 --chunk-size 100 --page-size 64)
  pf_mpi_case(${source}.pp8_one_layer_each_ring1 ${source} 8 --pp 8 --chunk-size 32 --page-size 16 --ring-depth 1)
endforeach()
# Ring depths other than the default 4: small chunks keep many micro-batches in flight, so
# up to `depth` receives are posted ahead and `depth` sends are uncommitted at once.
pf_mpi_case(tiny.pp4_ring2 tiny 4 --pp 4 --chunk-size 24 --page-size 16 --ring-depth 2)
pf_mpi_case(synthetic-tiny.pp2_tp2_ring8 synthetic-tiny 4 --pp 2 --tp 2 --chunk-size 24 --page-size 16 --ring-depth 8)
# Dynamic chunking: profiled now (timings vary, the logits must not), or from a saved
# profile with fixed coefficients (deterministic plans that really vary the chunk size).
pf_mpi_case(tiny.pp2_dynamic_profiled tiny 2 --pp 2 --dynamic-chunking --chunk-size 128 --page-size 16 --profile-points 12)
pf_mpi_case(synthetic-tiny.pp2_tp2_pipefill_profiled synthetic-tiny 4 --pp 2 --tp 2 --chunk-policy pipefill
            --chunk-size 128 --page-size 16 --profile-points 12)
add_test(NAME setup.cost_model COMMAND ${PF_MPI}/make_cost_model.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(setup.cost_model PROPERTIES FIXTURES_SETUP cost_model FIXTURES_REQUIRED model.tiny LABELS mpi)
pf_mpi_case(tiny.pp2_dynamic_cost_model tiny 2 --pp 2 --dynamic-chunking --cost-model ${PF_DATA}/cost_tiny_pp2.json
            --chunk-size 128 --page-size 16)
pf_mpi_case(tiny.pp2_pipefill_cost_model tiny 2 --pp 2 --chunk-policy pipefill --cost-model ${PF_DATA}/cost_tiny_pp2.json
            --chunk-size 128 --page-size 16 --smooth-factor 0.6)
# A cost model under which fixed chunks are predicted faster: the pipefill policy keeps them.
pf_mpi_case(tiny.pp2_pipefill_slower_than_fixed tiny 2 --pp 2 --chunk-policy pipefill
            --cost-model ${PF_DATA}/cost_tiny_pp2_overhead.json --chunk-size 128 --page-size 16 --smooth-factor 0.6)
set_tests_properties(mpi.tiny.pp2_pipefill_slower_than_fixed PROPERTIES ENVIRONMENT EXPECT_POLICY=fixed)
foreach(case tiny.pp2_dynamic_cost_model tiny.pp2_pipefill_cost_model tiny.pp2_pipefill_slower_than_fixed)
  set_tests_properties(mpi.${case} PROPERTIES FIXTURES_REQUIRED "reference.tiny;numpy.tiny;prompts;cost_model")
endforeach()
set_tests_properties(mpi.tiny.pp2_dynamic_cost_model PROPERTIES ENVIRONMENT EXPECT_POLICY=sglang)
set_tests_properties(mpi.tiny.pp2_pipefill_cost_model PROPERTIES ENVIRONMENT EXPECT_POLICY=pipefill)
# plan, run and simulate agree on the pipefill policy's plan, kept or given up for fixed chunks.
add_test(NAME mpi.plan_matches_run COMMAND ${PF_MPI}/plan_matches_run.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.plan_matches_run PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED "model.tiny;prompts;cost_model")
add_test(NAME mpi.profile_failure_disables_dynamic_chunking COMMAND ${PF_MPI}/profile_failure.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.profile_failure_disables_dynamic_chunking PROPERTIES LABELS mpi
                     FIXTURES_REQUIRED "reference.tiny;prompts" TIMEOUT 300)

pf_mpi_case(qwen2_sharded_bf16_pp2_tp2 qwen2 4 --pp 2 --tp 2 --chunk-size 48 --page-size 16)

# Context parallelism (sched/context_split.hpp): each CP rank computes its zigzag share of every
# chunk, holds its shard of the KV cache and attends over the ring (pass-KV), by gathered
# queries (pass-Q), or whichever moves fewer bytes per chunk (auto); the last stage gathers the
# rows for the results. Chunks not divisible by 2 x cp (50 over 6 pieces, 37 over 4), prompts
# shorter than a chunk (100000), every product, with pp and tp, 8 ranks oversubscribed.
pf_mpi_case(tiny.cp2_pass_kv tiny 2 --cp 2 --chunk-size 64 --page-size 16 --cp-attention pass-kv --logprobs --top-k 5
            --hidden-states mean)
pf_mpi_case(tiny.cp2_pass_q_unchunked tiny 2 --cp 2 --chunk-size 100000 --cp-attention pass-q --logprobs --top-k 3
            --hidden-states last)
pf_mpi_case(synthetic-tiny.cp3_chunk50 synthetic-tiny 3 --cp 3 --chunk-size 50 --page-size 16 --logprobs --top-k 2)
pf_mpi_case(tiny.pp2_cp2_chunk37 tiny 4 --pp 2 --cp 2 --chunk-size 37 --page-size 16 --hidden-states mean)
pf_mpi_case(tiny.pp2_cp2_tp2 tiny 8 --pp 2 --cp 2 --tp 2 --chunk-size 40 --page-size 16 --logprobs --top-k 3)
pf_mpi_case(qwen3.cp2_tp2 qwen3 4 --cp 2 --tp 2 --chunk-size 33 --page-size 16 --cp-attention pass-q --logprobs --top-k 4)
pf_mpi_case(qwen2.cp2_bf16_weights qwen2 2 --cp 2 --chunk-size 48 --page-size 16)
# Dynamic chunks from a profile taken now, each CP rank timing its share of every profiled
# chunk over the ring (timings vary, the logits must not).
pf_mpi_case(tiny.pp2_cp2_dynamic_profiled tiny 4 --pp 2 --cp 2 --chunk-policy pipefill --chunk-size 128 --page-size 16
            --profile-points 12 --logprobs --top-k 2)
# Prefix reuse with CP is rounded down to chunk boundaries (sched/context_split.hpp).
add_test(NAME mpi.cp2_reuse_on_chunk_boundaries COMMAND ${PF_MPI}/cp_reuse_alignment.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.cp2_reuse_on_chunk_boundaries PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 300
                     FIXTURES_REQUIRED model.tiny)
# A prompt whose KV does not fit one rank's --kv-memory-mb runs at cp 2 in the same budget.
add_test(NAME mpi.cp2_holds_what_one_rank_cannot COMMAND ${PF_MPI}/cp_kv_budget.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.cp2_holds_what_one_rank_cannot PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 300
                     FIXTURES_REQUIRED model.tiny)
pf_mpi_case(qwen3_pp2_chunk33 qwen3 2 --pp 2 --chunk-size 33 --page-size 16)

# Every position's scores and the hidden states (checked against the numpy reference's, from
# full logits): the vocabulary split over 1 and 2 TP ranks (uneven splits: tests/unit and
# transformers.scores), chunks that cut prompts, many stages, a dynamic plan, biases and q/k norm.
pf_mpi_case(tiny.scores_pp1 tiny 1 --pp 1 --chunk-size 64 --logprobs --top-k 5 --hidden-states mean)
pf_mpi_case(synthetic-tiny.scores_pp2_tp2 synthetic-tiny 4 --pp 2 --tp 2 --chunk-size 40 --page-size 16 --logprobs
            --top-k 3 --hidden-states last)
pf_mpi_case(tiny.scores_pp4_tp2 tiny 8 --pp 4 --tp 2 --chunk-size 64 --page-size 16 --logprobs --top-k 1)
pf_mpi_case(tiny.scores_tp2_topk_only tiny 2 --tp 2 --chunk-size 100 --top-k 4)
pf_mpi_case(tiny.scores_pp2_pipefill_cost_model tiny 2 --pp 2 --chunk-policy pipefill
            --cost-model ${PF_DATA}/cost_tiny_pp2.json --chunk-size 128 --page-size 16 --logprobs --top-k 2)
set_tests_properties(mpi.tiny.scores_pp2_pipefill_cost_model PROPERTIES
                     FIXTURES_REQUIRED "reference.tiny;numpy.tiny;prompts;cost_model" ENVIRONMENT EXPECT_POLICY=pipefill)
pf_mpi_case(qwen2.scores_pp2_tp2 qwen2 4 --pp 2 --tp 2 --chunk-size 48 --page-size 16 --logprobs --top-k 4)
pf_mpi_case(qwen3.scores_pp2 qwen3 2 --pp 2 --chunk-size 33 --page-size 16 --logprobs --top-k 4 --hidden-states last)

# Prefix reuse (sched/prefix_sharing.hpp): prompts sharing a document, a multi-turn history,
# duplicates and branches. The reused runs match both references (logits, every position's
# scores, hidden states last and mean, whose sums pass along chains of sources) and reuse
# the expected number of tokens; --no-prefix-cache reuses none.
add_test(NAME setup.prompts_shared COMMAND ${PF_PY} ${PF_MPI}/make_shared_prompts.py ${PF_DATA}/shared.h5)
set_tests_properties(setup.prompts_shared PROPERTIES FIXTURES_SETUP prompts_shared FIXTURES_REQUIRED data LABELS mpi)
foreach(model tiny qwen3)
  add_test(NAME setup.reference.shared.${model}
           COMMAND pipefill_reference --model ${PF_DATA}/${model} --input ${PF_DATA}/shared.h5 --output ${PF_DATA}/ref_shared_${model}.h5)
  add_test(NAME setup.numpy.shared.${model}
           COMMAND ${PF_PY} ${CMAKE_CURRENT_SOURCE_DIR}/reference/numpy_reference.py ${PF_DATA}/${model} ${PF_DATA}/shared.h5 ${PF_DATA}/np_shared_${model}.h5 --top-k 5)
  set_tests_properties(setup.reference.shared.${model} setup.numpy.shared.${model} PROPERTIES
                       FIXTURES_REQUIRED "model.${model};prompts_shared" FIXTURES_SETUP shared.${model} LABELS mpi)
endforeach()
function(pf_shared_case name model ranks reused)
  add_test(NAME mpi.${name}
           COMMAND ${PF_MPI}/run_and_compare.sh ${PF_BIN} ${ranks} ${PF_DATA}/out_${name}.h5
                   "${PF_DATA}/ref_shared_${model}.h5 ${PF_DATA}/np_shared_${model}.h5"
                   -- --model ${PF_DATA}/${model} --input ${PF_DATA}/shared.h5 ${ARGN})
  set_tests_properties(mpi.${name} PROPERTIES LABELS mpi PROCESSORS ${ranks} ENVIRONMENT EXPECT_REUSED=${reused}
                       FIXTURES_REQUIRED "shared.${model}" TIMEOUT 300)
endfunction()
pf_shared_case(tiny.shared_prefix_pp2 tiny 2 1264 --pp 2 --chunk-size 64 --page-size 16 --logprobs --top-k 5
               --hidden-states mean)
pf_shared_case(tiny.shared_prefix_pp2_tp2 tiny 4 1264 --pp 2 --tp 2 --chunk-size 40 --page-size 16 --logprobs --top-k 3
               --hidden-states last)
pf_shared_case(tiny.shared_prefix_pp1_unchunked tiny 1 1264 --chunk-size 100000 --page-size 16 --hidden-states mean)
pf_shared_case(tiny.shared_prefix_pp4_page32 tiny 4 1248 --pp 4 --chunk-size 24 --page-size 32 --logprobs
               --hidden-states mean)
pf_shared_case(tiny.shared_prefix_dynamic tiny 2 1264 --pp 2 --dynamic-chunking --cost-model ${PF_DATA}/cost_tiny_pp2.json
               --chunk-size 128 --page-size 16 --logprobs --top-k 2 --hidden-states mean)
set_tests_properties(mpi.tiny.shared_prefix_dynamic PROPERTIES FIXTURES_REQUIRED "shared.tiny;cost_model")
pf_shared_case(qwen3.shared_prefix_pp2_tp2 qwen3 4 1264 --pp 2 --tp 2 --chunk-size 33 --page-size 16 --logprobs
               --top-k 4 --hidden-states mean)
pf_shared_case(tiny.shared_prefix_off tiny 2 0 --pp 2 --chunk-size 64 --page-size 16 --logprobs --no-prefix-cache)
# With --cp each CP rank takes over its own rows of the shared prefix (whole pages shared, the
# last partial page copied), the reuse rounded down to the chunks (64, 40): 1152 and 1120 of
# the 1264 tokens a run without CP reuses.
pf_shared_case(tiny.shared_prefix_cp2 tiny 2 1152 --cp 2 --chunk-size 64 --page-size 16 --logprobs --hidden-states mean)
pf_shared_case(tiny.shared_prefix_pp2_cp3 tiny 6 1120 --pp 2 --cp 3 --chunk-size 40 --page-size 16 --logprobs --top-k 3
               --hidden-states last --cp-attention pass-q)

# Bad inputs: one `error:` line from rank 0, exit status 2, no output file, no hang.
set(PF_BAD_CASES
  missing_model model_is_file profile_out_is_model_file checkpoint_dir_is_file checkpoint_dir_foreign input_inside_checkpoint_dir missing_weights_file bad_config_json missing_input input_is_directory missing_tokens float_tokens offsets_not_zero
  offsets_decreasing offsets_past_end token_outside_vocab empty_prompt
  truncated_safetensors header_length_past_end bad_header_json tensor_range_outside_file
  shape_mismatch unknown_architecture missing_tensor world_size_mismatch more_stages_than_layers
  bad_partition_sum bad_partition_count tp_not_dividing_heads tp_not_dividing_heads_emulate prompt_exceeds_kv_budget prompt_exceeds_context
  output_directory_missing unknown_flag unknown_preset zero_chunk_size
  cp_world_size cp_world_size_wraps kv_memory_mb_huge cp_emulate_profile cp_profile_without_cp cp_attention_without_cp cp_attention_unknown cp_cuda_mla_wide
  smooth_factor_out_of_range smooth_factor_env_not_a_number bf16_gemm_env_unknown f32_gemm_env_unknown cost_model_without_dynamic
  cost_model_other_partition cost_model_missing cost_model_directory hardware_directory plan_profile_of_other_pp
  make_model_over_model make_model_over_checkpoint forward_exceeds_memory profile_forward_exceeds_memory
  make_prompts_too_many make_prompts_over_run_output make_prompts_over_model_file make_prompts_while_a_run_writes
  make_prompts_over_stopped_run make_prompts_over_corpus
  simulate_timeline_over_run_output advise_plot_over_model_file
  emulate_without_cost_model analytic_without_emulate hidden_states_unknown hidden_states_emulate logprobs_emulate
  top_k_negative top_k_over_vocab token_ids_missing token_ids_not_a_number token_ids_repeated token_ids_empty
  token_ids_over_vocab kv_dtype_without_save_kv kv_dtype_unknown dtype_unknown dtype_bf16_emulate
  dtype_bf16_moe threads_too_many threads_negative save_kv_is_file save_kv_is_output save_kv_holds_input
  save_kv_dangling_link save_kv_emulate kv_store_emulate kv_store_inside_save_kv save_kv_is_checkpoint_dir kv_store_inside_checkpoint_dir unknown_hardware hdf5_library_crash
  save_kv_over_export save_kv_into_store save_kv_into_model kv_store_in_export kv_store_is_entry
  output_is_input output_links_to_input trace_is_input trace_is_output trace_is_partial trace_is_token_ids
  trace_exists trace_is_model_file output_is_model_file output_is_directory
  output_ends_in_slash output_empty trace_directory_missing trace_is_directory trace_takes_no_files output_held_by_another_run
  input_is_fifo config_is_fifo weights_are_fifo output_exists resume_and_overwrite save_kv_held_by_another_run
  router_bias_nan router_bias_all_inf
  resume_complete_other_input resume_complete_rebuilt_weights resume_complete_other_chunking resume_over_garbage
  resume_over_foreign_hdf5 resume_partial_wrong_shape resume_partial_truncated resume_partial_garbage
  heterogeneous_arguments stale_weights_on_a_node stale_layer_gained_from_a_profile stale_config_on_a_node
  cost_model_negative_coefficient cost_model_stage_count flag_value_not_a_number)
if(PIPEFILL_HAVE_CUDA)  # --backend cuda exists in this build
  list(APPEND PF_BAD_CASES cuda_without_device cuda_page_size unknown_transport kv_memory_fraction_out_of_range)
endif()
foreach(case ${PF_BAD_CASES})
  add_test(NAME bad_input.${case} COMMAND ${PF_MPI}/bad_input.sh ${PF_BIN} ${case} ${PF_DATA})
  set_tests_properties(bad_input.${case} PROPERTIES LABELS mpi TIMEOUT 120 SKIP_RETURN_CODE 77
                       FIXTURES_REQUIRED "model.tiny;prompts")
endforeach()
set_tests_properties(bad_input.cost_model_other_partition bad_input.stale_layer_gained_from_a_profile
                     bad_input.cost_model_negative_coefficient
                     bad_input.cost_model_stage_count bad_input.cp_emulate_profile bad_input.cp_profile_without_cp PROPERTIES FIXTURES_REQUIRED "model.tiny;prompts;cost_model")

add_test(NAME mpi.emulate_8_ranks_on_2_cores COMMAND ${PF_MPI}/emulate_run.sh ${PF_BIN})
set_tests_properties(mpi.emulate_8_ranks_on_2_cores PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2)
add_test(NAME mpi.emulate_profile_of_a_model_directory COMMAND ${PF_MPI}/emulate_profile.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.emulate_profile_of_a_model_directory PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2
                     FIXTURES_REQUIRED model.tiny)
add_test(NAME mpi.emulate_context_parallel COMMAND ${PF_MPI}/emulate_cp.sh ${PF_BIN})
set_tests_properties(mpi.emulate_context_parallel PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 2)

# The simulator against the emulated runtime (sleeps of the same cost model, real MPI and
# message sizes): TTFT within 5 % at P = 2 and 4, fixed and dynamic chunks. The full table
# (P up to 16) is scripts/validate_simulator.sh, in docs/performance.md. 24K tokens: about
# 30 s of emulated sleep since GEMM tile rows made Qwen3's small expert GEMMs dearer.
add_test(NAME slow.simulator_matches_emulated_runs
         COMMAND ${CMAKE_SOURCE_DIR}/scripts/validate_simulator.sh "2 4" 24576 5)
set_tests_properties(slow.simulator_matches_emulated_runs PROPERTIES LABELS "slow;mpi" TIMEOUT 600 RUN_SERIAL TRUE
                     ENVIRONMENT "PIPEFILL_BIN=${CMAKE_BINARY_DIR}/pipefill")

# No hangs: a hung rank trips the watchdog, a killed rank ends the job.
foreach(case hung_rank killed_rank)
  add_test(NAME mpi.no_hang.${case} COMMAND ${PF_MPI}/watchdog.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.no_hang.${case} PROPERTIES LABELS mpi TIMEOUT 120 FIXTURES_REQUIRED model.tiny)
endforeach()

# Kill a run mid-batch (a forwarded signal, and SIGKILL of one rank), resume, compare.
foreach(case signal sigterm sigterm_rank1 kill signal_tp2 signal_logprobs signal_shared_prefix signal_cp2)
  add_test(NAME mpi.resume_after_${case} COMMAND ${PF_MPI}/resume.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.resume_after_${case} PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED model.tiny
                       RUN_SERIAL TRUE)
endforeach()

# What a crash can leave in a partial output, and SIGTERM to mpirun; each resumed output
# must equal an uninterrupted run's.
foreach(case torn_row torn_hidden torn_token_rows overwrite_stopped empty_partial stale_partial mpirun_sigterm stop_inside_prompt
             stop_inside_span stop_inside_prompt_new_layout stop_inside_prompt_cp checkpoint_disk_full
             stop_during_start_up)
  add_test(NAME mpi.resume_integrity.${case} COMMAND ${PF_MPI}/resume_integrity.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.resume_integrity.${case} PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED model.tiny
                       SKIP_RETURN_CODE 77)
endforeach()
set_tests_properties(mpi.resume_integrity.mpirun_sigterm PROPERTIES RUN_SERIAL TRUE)
# 8 kills in CI (serial: each costs 3-4 s of wall time); kill_soak.sh BIN DATA 30 for a longer soak.
add_test(NAME slow.kill_and_resume_soak COMMAND ${PF_MPI}/kill_soak.sh ${PF_BIN} ${PF_DATA} 8)
set_tests_properties(slow.kill_and_resume_soak PROPERTIES LABELS "slow;mpi" TIMEOUT 900 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED model.tiny)
# Checkpoints inside one long prompt: SIGKILL of a random rank at random instants, resumed
# each time from the newest checkpoint, bit-identical at the end (2 kills, 4 in the slow one, on a
# 16K-token prompt; checkpoint_soak.sh BIN DATA 24 24576 for a longer soak).
add_test(NAME mpi.checkpoint_kill_and_resume COMMAND ${PF_MPI}/checkpoint_soak.sh ${PF_BIN} ${PF_DATA} 2 16384 1s)
add_test(NAME slow.checkpoint_soak COMMAND ${PF_MPI}/checkpoint_soak.sh ${PF_BIN} ${PF_DATA} 4 16384 1s)
set_tests_properties(mpi.checkpoint_kill_and_resume PROPERTIES LABELS mpi TIMEOUT 300 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED model.tiny)
set_tests_properties(slow.checkpoint_soak PROPERTIES LABELS "slow;mpi" TIMEOUT 900 RUN_SERIAL TRUE
                     FIXTURES_REQUIRED model.tiny)

# --save-kv: complete and equal to an uninterrupted run's after a stop, a lost file, a full disk.
foreach(case resume new_layout missing_file damaged_file killed_litter concurrent index_unwritable disk_full complete
             shared_prefix context_parallel)
  add_test(NAME mpi.kv_export.${case} COMMAND ${PF_MPI}/kv_export.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.kv_export.${case} PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED model.tiny
                       SKIP_RETURN_CODE 77)
endforeach()
set_tests_properties(mpi.kv_export.resume mpi.kv_export.killed_litter mpi.kv_export.concurrent PROPERTIES RUN_SERIAL TRUE)
# --kv-store: prefixes of earlier runs, damaged and foreign entries, concurrent publishers, the size limit.
foreach(case reuse mla_reuse damaged kept_parents resume_hidden_mean edited_ids other_layout shared rerun concurrent scores hidden_mean full limit
             context_parallel mla_context_parallel)
  add_test(NAME mpi.kv_store.${case} COMMAND ${PF_MPI}/kv_store.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.kv_store.${case} PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED model.tiny)
endforeach()

# The weights' identity covers every value: an edit of two floats in a 2 MiB tensor is seen
# by --kv-store and --resume, and every layout of one model has one identity.
foreach(case kv_store resume layouts)
  add_test(NAME mpi.weights_identity.${case} COMMAND ${PF_MPI}/weights_identity.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.weights_identity.${case} PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED model.tiny)
endforeach()

# scripts/perplexity.py on a --logprobs output (runs under the venv).
add_test(NAME mpi.perplexity_tool COMMAND ${PF_MPI}/perplexity_tool.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.perplexity_tool PROPERTIES LABELS "mpi;reference" TIMEOUT 300
                     FIXTURES_REQUIRED "model.tiny;prompts;venv")

# The summary's all-reduce traffic against its formula, per stage.
add_test(NAME mpi.traffic_formula COMMAND ${PF_MPI}/traffic_formula.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.traffic_formula PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED "model.tiny;prompts")

# profile --max-prefix past the KV pool: capped, with a warning.
add_test(NAME mpi.profile_range_capped COMMAND ${PF_MPI}/profile_range.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.profile_range_capped PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED model.tiny)

# Weights holding NaN load with a warning naming the tensor (the run itself completes).
add_test(NAME mpi.nan_weights_warn COMMAND ${PF_MPI}/nan_weights.sh ${PF_BIN} ${PF_DATA})
set_tests_properties(mpi.nan_weights_warn PROPERTIES LABELS mpi TIMEOUT 120 FIXTURES_REQUIRED "model.tiny;prompts")

# Ranks sharing CPUs lend them while they wait; bound ranks have nothing to lend.
foreach(case shared bound)
  add_test(NAME mpi.lent_cpus.${case} COMMAND ${PF_MPI}/lent_cpus.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.lent_cpus.${case} PROPERTIES LABELS mpi TIMEOUT 300 FIXTURES_REQUIRED "model.tiny;prompts")
endforeach()

# OpenBLAS's kernels chosen by the CPU's features, not its model; generic ones warned about.
# own_avx2: our AVX2 GEMMs (PIPEFILL_CPU_ISA=avx2) against the float64 reference.
foreach(case features forced_generic own_avx2)
  add_test(NAME mpi.blas_kernels.${case} COMMAND ${PF_MPI}/blas_kernels.sh ${PF_BIN} ${PF_DATA} ${case})
  set_tests_properties(mpi.blas_kernels.${case} PROPERTIES LABELS mpi TIMEOUT 300
                       FIXTURES_REQUIRED "model.tiny;prompts;reference.tiny")
endforeach()

# `pipefill advise`: the table, the job line, --json, --input, --plot and its bad inputs.
add_test(NAME advise.command COMMAND ${PF_MPI}/advise_command.sh ${PF_BIN} ${CMAKE_SOURCE_DIR})
set_tests_properties(advise.command PROPERTIES LABELS mpi TIMEOUT 120)
# The H20 file is what scripts/calibrate_paper.py derives (matmuls fitted at most 0.8, attention
# predicted from the H100's), and frozen it predicts the seed's 512K and 1M TTFTs within 10 %.
add_test(NAME advise.seed_table COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/scripts/calibrate_paper.py --pipefill
                                        ${PF_BIN}/pipefill --check WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(advise.seed_table PROPERTIES LABELS mpi TIMEOUT 120)
