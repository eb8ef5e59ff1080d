#!/usr/bin/env bash
# What --resume does with a partial output that a crash could leave, each compared with an
# uninterrupted run (the logits must be equal):
#   torn_row        rows marked complete whose bytes fail their checksum (a write the OS did
#                   not order before its flag), and a TTFT torn the same way: recomputed,
#                   with a warning naming each prompt
#   torn_hidden     the same with --hidden-states mean: a row whose /hidden_states bytes are
#                   torn (its logits intact) is named and recomputed, and the resumed
#                   /hidden_states equal an uninterrupted run's bit for bit; resuming with
#                   another --hidden-states is refused (exit 2) and leaves the partial as it was
#   torn_token_rows the same with --logprobs --top-k 2, then --top-k 2 alone: a prompt whose
#                   /token_logprobs (or /topk_logprobs) entry is
#                   torn and another whose /topk_ids entry is are named and recomputed (the rest
#                   of their rows intact), and every token dataset equals an uninterrupted run's
#   stop_during_start_up  SIGUSR1 to the ranks while they start (MPI_Init): exit 75 with
#                   nothing computed, and --resume then computes every prompt
#   overwrite_stopped  a complete output computed again with --overwrite, stopped inside its
#                   prompt: --resume (the input's path spelt another way) continues that partial
#                   and its checkpoint (not "already complete"), and the output it completes is
#                   the uninterrupted run's
#   empty_partial   a 0-byte partial (a kill before the first write): a note, a fresh start
#   stale_partial   a partial left by an earlier run, run again *without* --resume: a
#                   warning says it is replaced
#   mpirun_sigterm  SIGTERM to mpirun itself (plain `kill`, `timeout`), mid-run: Open MPI
#                   forwards it to the ranks, SIGKILLs them 1 s later (odls_base_sigkill_timeout)
#                   and exits 1. Prompts finished before are safe; those in flight are lost and
#                   computed again by --resume. (SIGUSR1 is the clean stop: see resume.sh.)
#   checkpoint_disk_full  --checkpoint-every on a full file system (a small tmpfs holding the
#                   output): one `warning:` naming the rank and the reason, the run goes on
#                   without checkpoints and completes its output (exit 0)
#   stop_inside_prompt  SIGUSR1 once the only prompt has started: the stop cuts it at the next
#                   chunk, checkpoints it and exits 75; --resume restores it there
#                   (/restored_tokens) and its logits equal the uninterrupted run's bit for bit
#   stop_inside_prompt_new_layout  the same stop (pp 2, --logprobs --hidden-states mean), resumed
#                   onto another allocation: pp 1 x tp 2 (each rank reads the layers and heads it
#                   needs from the pp 2 files), then, stopped again, back to pp 2; logits,
#                   log-probs and mean hidden states within float32 rounding of the uninterrupted run
#   stop_inside_prompt_cp  the same with context parallelism: pp 2 x cp 2 with --checkpoint-every
#                   (CP rank 0 of each stage writes the rows its group gathers), resumed at cp 2
#                   (pp 1) and stopped again, finished at pp 2 without CP
# usage: resume_integrity.sh BIN_DIR DATA_DIR CASE
set -euo pipefail
here=$(dirname "$0")
source "$here/mpi_env.sh"
bin=$1 data=$2 case=$3
temp_dir work
MPI_TIMEOUT=120
args=(run --model "$data/tiny" --pp 2 --chunk-size 64 --page-size 16)
run() { pipefill_mpi 2 "${args[@]}" --quiet "$@"; }
"$bin/pipefill" make-prompts --out "$work/in.h5" --num 6 --min-len 100 --max-len 400 --vocab 512 --seed 4 >/dev/null
run --input "$work/in.h5" --output "$work/reference.h5"

# forge PYTHON: edits $work/out.h5.partial with h5py (`f` is the open file).
forge() {
  cp "$work/reference.h5" "$work/out.h5.partial"
  "$PYTHON" - "$work/out.h5.partial" <<PY
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    $1
PY
}

# ranks_starting N: N ranks of the run of start_run have begun: main() has caught SIGUSR1
# (bit 9 of SigCgt), or MPI_Init has started its threads. Either way it is the start-up,
# before any prompt, where a stop used to kill the rank. Polled without subprocesses once the
# ranks are known (MPI_Init lasts a fraction of a second here).
starting_pids=()
ranks_starting() {
  local pid count=0 key value tasks exe
  if [ ${#starting_pids[@]} -lt "$1" ]; then
    starting_pids=()
    for pid in $(rank_pids); do
      # Not yet exec'ed (still a copy of mpirun, which catches SIGUSR1 to forward it): not a rank.
      exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
      [ "$exe" = "$(readlink -f "$bin/pipefill")" ] && starting_pids+=("$pid")
    done
    [ ${#starting_pids[@]} -ge "$1" ] || return 1
  fi
  for pid in "${starting_pids[@]}"; do
    tasks=(/proc/"$pid"/task/*)
    if [ ${#tasks[@]} -gt 1 ]; then count=$((count + 1)); continue; fi
    while read -r key value; do
      if [ "$key" = "SigCgt:" ] && (( (16#$value >> 9) & 1 )); then count=$((count + 1)); break; fi
    done <"/proc/$pid/status" 2>/dev/null || true
  done
  [ "$count" -ge "$1" ]
}

# stop_resume_across "RANKS ARGS" x 3: one 3000-token prompt (--logprobs --hidden-states mean)
# started in the first layout and stopped by SIGUSR1 inside it (its checkpoint written), resumed
# in the second and stopped again, finished in the third from the second's checkpoint (or the
# second finishes it); logits, log-probs and mean hidden states within float32 rounding of an
# uninterrupted pp 2 run, and the checkpoint directory gone.
stop_resume_across() {
  local first_layout=($1) second_layout=($2) third_layout=($3)
  "$bin/pipefill" make-prompts --out "$work/in.h5" --num 1 --min-len 3000 --max-len 3000 --vocab 512 --seed 9 >/dev/null
  local scores=(--chunk-size 16 --page-size 16 --logprobs --hidden-states mean)
  pipefill_mpi 2 run --model "$data/tiny" --pp 2 "${scores[@]}" --quiet --input "$work/in.h5" \
    --output "$work/reference.h5" --overwrite
  # stopped_at LOG: the token the stop's checkpoint of prompt 0 was written at.
  stopped_at() { sed -n 's/^checkpoint [0-9]*: prompt 0 at token \([0-9]*\) of 3000.*/\1/p' "$1" | tail -1; }
  # A stop's checkpoint is the last one the run announces (--checkpoint-every announces others before).
  start_run "$work/first.log" "${first_layout[0]}" run --model "$data/tiny" "${first_layout[@]:1}" "${scores[@]}" \
    --progress-interval 0.05 --input "$work/in.h5" --output "$work/out.h5"
  wait_until 120 "a first progress line" grep -q '^progress:' "$work/first.log"
  signal_run USR1 mpirun
  finish_run
  expect_status 75 "a stop inside the only prompt"
  local first second
  first=$(stopped_at "$work/first.log")
  [ -n "$first" ] || { cat "$work/first.log"; fail "the stop wrote no checkpoint of the prompt"; }
  start_run "$work/second.log" "${second_layout[0]}" run --model "$data/tiny" "${second_layout[@]:1}" "${scores[@]}" \
    --progress-interval 0.05 --input "$work/in.h5" --output "$work/out.h5" --resume
  wait_until 120 "the resumed run's progress" grep -q '^progress:' "$work/second.log"
  signal_run USR1 mpirun
  finish_run
  grep -q "^resuming prompt 0 at token $first of 3000" "$work/second.log" ||
    { cat "$work/second.log"; fail "${second_layout[*]:1} did not resume the checkpoint at token $first"; }
  if [ "$status" = 75 ]; then
    second=$(stopped_at "$work/second.log")
    [ -n "$second" ] && [ "$second" -gt "$first" ] || fail "the second stop wrote no later checkpoint"
    pipefill_mpi "${third_layout[0]}" run --model "$data/tiny" "${third_layout[@]:1}" "${scores[@]}" \
      --input "$work/in.h5" --output "$work/out.h5" --resume | tee "$work/third.log" |
      grep "^resuming prompt 0 at token $second of 3000" ||
      { cat "$work/third.log"; fail "${third_layout[*]:1} did not resume the checkpoint at token $second"; }
  else
    expect_status 0 "the resumed run (it finished before its stop)"
  fi
  [ ! -e "$work/out.h5.checkpoint" ] || fail "a complete run left its checkpoint directory"
  "$PYTHON" - "$work/out.h5" "$work/reference.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2]) as ref:
    assert f["restored_tokens"][0] > 0, f["restored_tokens"][:]
    for name in ("logits", "token_logprobs", "hidden_states", "nll_sum"):
        a, b = f[name][:], ref[name][:]
        assert np.array_equal(np.isnan(a), np.isnan(b)), f"{name}: NaN at other positions"
        d = np.nanmax(np.abs(a - b))
        assert d < (1e-2 if name == "nll_sum" else 1e-4), f"{name} differ by {d}"
        print(f"{name} within {d:.2g} of the uninterrupted pp 2 run")
PY
}

case $case in
  torn_row)
    forge 'f["logits"][1] = np.zeros(f["logits"].shape[1], np.float32); f["ttft_s"][3] = 0.5; f["completed"][4] = 0'
    run --input "$work/in.h5" --output "$work/out.h5" --resume 2>"$work/stderr"
    cat "$work/stderr"
    for p in 1 3; do
      grep -q "^warning: prompt $p in .*failed its checksum" "$work/stderr" || fail "torn prompt $p not named"
    done
    [ "$(grep -c 'failed its checksum' "$work/stderr")" -eq 2 ] || fail "intact rows were called torn" ;;
  torn_hidden)
    # (each run names its own --hidden-states: a flag given twice is refused)
    run --input "$work/in.h5" --output "$work/reference.h5" --overwrite --hidden-states mean  # this case's reference
    forge 'f["hidden_states"][2, 5] += 1.0; f["completed"][4] = 0'
    before=$(md5sum <"$work/out.h5.partial")
    status_of run --input "$work/in.h5" --output "$work/out.h5" --resume --hidden-states last 2>"$work/stderr"
    cat "$work/stderr"
    expect_status 2 "a resume with another --hidden-states"
    grep -q "^error: .*another hidden_states" "$work/stderr" || fail "the refusal does not name --hidden-states"
    [ "$(md5sum <"$work/out.h5.partial")" = "$before" ] || fail "the refused resume changed the partial"
    status_of run --input "$work/in.h5" --output "$work/out.h5" --resume --hidden-states none 2>"$work/stderr"
    cat "$work/stderr"
    expect_status 2 "a resume without --hidden-states"
    grep -q "^error: .*another hidden_states (\"mean\", this run: none)" "$work/stderr" ||
      fail "the refusal does not name --hidden-states"
    [ "$(md5sum <"$work/out.h5.partial")" = "$before" ] || fail "the refused resume changed the partial"
    run --input "$work/in.h5" --output "$work/out.h5" --resume --hidden-states mean 2>"$work/stderr"
    cat "$work/stderr"
    grep -q "^warning: prompt 2 in .*failed its checksum" "$work/stderr" || fail "torn hidden state of prompt 2 not named"
    [ "$(grep -c 'failed its checksum' "$work/stderr")" -eq 1 ] || fail "intact rows were called torn"
    "$PYTHON" - "$work/out.h5" "$work/reference.h5" <<'PY' || fail "/hidden_states differ from the uninterrupted run"
import sys, h5py, numpy as np
got, want = (h5py.File(p, "r")["hidden_states"][:] for p in sys.argv[1:])
print(f"/hidden_states {got.shape}: equal to the uninterrupted run: {np.array_equal(got, want)}")
sys.exit(0 if got.shape == want.shape and np.array_equal(got, want) else 1)
PY
    ;;
  torn_token_rows)
    # Scores of both kinds, then top-k alone (its checksum holds no NLL or perplexity).
    for scores in "--logprobs --top-k 2" "--top-k 2"; do
      echo "== $scores"
      rm -f "$work/out.h5"  # the first round's (another identity: --resume would refuse it)
      # shellcheck disable=SC2086
      set -- $scores
      run --input "$work/in.h5" --output "$work/reference.h5" --overwrite "$@"
      if [ "$1" = --logprobs ]; then torn='f["token_logprobs"][o[2] + 7] -= 0.5'; else torn='f["topk_logprobs"][o[2] + 7, 0] -= 0.5'; fi
      forge 'o = h5py.File("'"$work/in.h5"'", "r")["offsets"][:]
    '"$torn"'; f["topk_ids"][o[3] + 1, 1] += 1; f["completed"][4] = 0'
      run --input "$work/in.h5" --output "$work/out.h5" --resume "$@" 2>"$work/stderr"
      cat "$work/stderr"
      for p in 2 3; do
        grep -q "^warning: prompt $p in .*failed its checksum" "$work/stderr" || fail "torn token rows of prompt $p not named"
      done
      [ "$(grep -c 'failed its checksum' "$work/stderr")" -eq 2 ] || fail "intact rows were called torn"
      "$PYTHON" - "$work/out.h5" "$work/reference.h5" <<'PY' || fail "token rows differ from the uninterrupted run"
import sys, h5py, numpy as np
got, want = (h5py.File(p, "r") for p in sys.argv[1:])
ok = True
for name in ("token_logprobs", "perplexity", "nll_sum", "topk_ids", "topk_logprobs"):
    if name not in want:
        ok = ok and name not in got
        continue
    same = np.array_equal(got[name][:], want[name][:], equal_nan=True)
    print(f"/{name} {got[name].shape}: equal to the uninterrupted run: {same}")
    ok = ok and same
sys.exit(0 if ok else 1)
PY
    done
    ;;
  stop_during_start_up)
    # SIGUSR1 to the ranks themselves while they start (in MPI_Init, or before it), as Slurm's
    # scancel --signal sends it (mpirun forwards a signal only once its job is up): nothing is
    # computed, the run exits 75, and --resume then computes everything from a clean start.
    start_run "$work/first.log" 2 "${args[@]}" --input "$work/in.h5" --output "$work/out.h5"
    end=$((SECONDS + 30))  # polled without naps: the start-up is short
    until ranks_starting 2; do [ "$SECONDS" -lt "$end" ] || fail "the ranks never started"; done
    signal_run USR1 ranks
    finish_run
    cat "$work/first.log"
    expect_status 75 "a run stopped during its start-up"
    # mpirun forwards the signal when it can: rank 0 may have issued a prompt by then.
    grep -qE "^stopped: [0-5] of 6 prompts" "$work/first.log" || fail "the stopped run does not say what it left"
    run --input "$work/in.h5" --output "$work/out.h5" --resume 2>"$work/stderr"
    cat "$work/stderr" ;;
  empty_partial)
    : >"$work/out.h5.partial"
    run --input "$work/in.h5" --output "$work/out.h5" --resume 2>"$work/stderr"
    cat "$work/stderr"
    grep -q "^note: .*out.h5.partial is empty" "$work/stderr" || fail "no note about the empty partial" ;;
  stale_partial)
    forge 'f["completed"][0:3] = 0'
    run --input "$work/in.h5" --output "$work/out.h5" 2>"$work/stderr"
    cat "$work/stderr"
    grep -q "^warning: replacing .*out.h5.partial" "$work/stderr" || fail "the stale partial was replaced silently" ;;
  mpirun_sigterm)
    num=24
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num $num --min-len 1500 --max-len 2500 --vocab 512 --seed 8 >/dev/null
    args=(run --model "$data/tiny" --pp 2 --chunk-size 16 --page-size 16)
    run --input "$work/in.h5" --output "$work/reference.h5" --overwrite  # this case's own reference
    # Mid-run: once a progress line says a prompt is stored, with most of the batch left.
    start_run "$work/first.log" 2 "${args[@]}" --progress-interval 0.05 --input "$work/in.h5" --output "$work/out.h5"
    wait_for_prompts 1
    stored=$(prompts_done "$work/first.log")
    signal_run TERM mpirun
    finish_run
    grep -v '^progress:' "$work/first.log"
    echo "mpirun exit status after SIGTERM: $status"
    # Open MPI decides what its ranks see (a clean stop, or SIGKILL before it is done); either
    # way the prompts stored before the signal are on disk, and --resume finishes the rest.
    [ -e "$work/out.h5.partial" ] || fail "no partial file after the SIGTERM"
    expect_interrupted_mid_run "$work/out.h5.partial" "$stored" $num "the SIGTERM"
    run --input "$work/in.h5" --output "$work/out.h5" --resume | grep -v "^$" || true ;;
  checkpoint_disk_full)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 1 --min-len 3000 --max-len 3000 --vocab 512 --seed 9 >/dev/null
    args=(run --model "$data/tiny" --pp 2 --chunk-size 16 --page-size 16)
    run --input "$work/in.h5" --output "$work/reference.h5" --overwrite
    # A real full disk: a 1 MiB tmpfs (root only; skipped elsewhere). The output fits; each
    # rank's checkpoint file (4 layers x 2 x 2 heads x 3000 tokens x 32 x 4 bytes) does not.
    mkdir "$work/small"
    mount -t tmpfs -o size=1m tmpfs "$work/small" 2>/dev/null || { echo "cannot mount a tmpfs: skipped"; exit 77; }
    on_exit "umount '$work/small'"
    status_of pipefill_mpi 2 "${args[@]}" --quiet --input "$work/in.h5" --output "$work/small/out.h5" \
      --checkpoint-every 0.01s 2>"$work/stderr"
    cat "$work/stderr"
    expect_status 0 "a run whose checkpoints failed"
    grep -q "^warning: the checkpoint of prompt 0 at token [0-9]* was not written (rank [01]: cannot write .*No space left on device); the run goes on without checkpoints" \
      "$work/stderr" || fail "no warning naming the rank and the reason"
    [ "$(grep -c '^warning:' "$work/stderr")" -eq 1 ] || fail "more than one warning"
    mv "$work/small/out.h5" "$work/out.h5" ;;
  overwrite_stopped)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 1 --min-len 3000 --max-len 3000 --vocab 512 --seed 9 >/dev/null
    args=(run --model "$data/tiny" --pp 2 --chunk-size 16 --page-size 16)
    run --input "$work/in.h5" --output "$work/reference.h5" --overwrite
    cp "$work/reference.h5" "$work/out.h5"
    PIPEFILL_TEST_MICRO_BATCH_DELAY_MS=5 start_run "$work/first.log" 2 "${args[@]}" --progress-interval 0.05 \
      --input "$work/in.h5" --output "$work/out.h5" --overwrite
    wait_until 120 "a first progress line" grep -q '^progress:' "$work/first.log"
    signal_run USR1 mpirun
    finish_run
    expect_status 75 "a stop inside the prompt of an --overwrite run"
    # (The input spelt another way: the contents, not the path as typed, are what must match.)
    pipefill_mpi 2 "${args[@]}" --input "$work/./in.h5" --output "$work/out.h5" --resume >"$work/resumed.log"
    grep -q "^resuming prompt 0 at token" "$work/resumed.log" ||
      { cat "$work/resumed.log"; fail "--resume did not continue the stopped --overwrite run's partial"; }
    [ ! -e "$work/out.h5.partial" ] && [ ! -e "$work/out.h5.checkpoint" ] || fail "the partial or its checkpoint was left"
    "$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol 0 ;;
  stop_inside_prompt)
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 1 --min-len 3000 --max-len 3000 --vocab 512 --seed 9 >/dev/null
    args=(run --model "$data/tiny" --pp 2 --chunk-size 16 --page-size 16)
    run --input "$work/in.h5" --output "$work/reference.h5" --overwrite  # this case's own reference
    # The first progress line comes after rank 0 finished a micro-batch: the prompt has started.
    start_run "$work/first.log" 2 "${args[@]}" --progress-interval 0.05 --input "$work/in.h5" --output "$work/out.h5"
    wait_until 120 "a first progress line" grep -q '^progress:' "$work/first.log"
    signal_run USR1 mpirun
    finish_run
    grep -v '^progress:' "$work/first.log"
    expect_status 75 "a stop inside the only prompt"
    checkpoint=$(sed -n 's/^checkpoint [0-9]*: prompt 0 at token \([0-9]*\) of 3000.*/\1/p' "$work/first.log")
    [ -n "$checkpoint" ] || fail "the stop wrote no checkpoint of the prompt"
    ls "$work/out.h5.checkpoint"/checkpoint-*.json >/dev/null || fail "no manifest in out.h5.checkpoint"
    pipefill_mpi 2 "${args[@]}" --input "$work/in.h5" --output "$work/out.h5" --resume | tee "$work/resumed.log" |
      grep "^resuming prompt 0 at token $checkpoint of 3000" || { cat "$work/resumed.log"; fail "the prompt was not resumed at token $checkpoint"; }
    [ ! -e "$work/out.h5.checkpoint" ] || fail "a complete run left its checkpoint directory"
    "$PYTHON" - "$work/out.h5" "$work/reference.h5" "$checkpoint" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2]) as ref:
    assert f["restored_tokens"][0] == int(sys.argv[3]), f["restored_tokens"][:]
    assert np.array_equal(f["logits"][:], ref["logits"][:]), "the resumed prompt's logits differ"
print("restored", sys.argv[3], "tokens; logits bit-identical to the uninterrupted run")
PY
    ;;
  stop_inside_span)
    # A prompt scored from position 200 (/score_start): a stop inside it, then --resume, gives
    # the scores, NLL, is_greedy and token-set rows (--token-ids) of an uninterrupted run, bit
    # for bit (rows before the span stay NaN and -1, the restored rows' digest covers them).
    "$bin/pipefill" make-prompts --out "$work/in.h5" --num 1 --min-len 3000 --max-len 3000 --vocab 512 --seed 9 >/dev/null
    "$PYTHON" -c "import h5py, numpy as np; h5py.File('$work/in.h5', 'a')['score_start'] = np.array([200], np.int64)"
    echo "7 300 11" >"$work/token_ids.txt"
    args=(run --model "$data/tiny" --pp 2 --chunk-size 16 --page-size 16 --logprobs --top-k 2
      --token-ids "$work/token_ids.txt")
    run --input "$work/in.h5" --output "$work/reference.h5" --overwrite
    start_run "$work/first.log" 2 "${args[@]}" --progress-interval 0.05 --input "$work/in.h5" --output "$work/out.h5"
    wait_until 120 "a first progress line" grep -q '^progress:' "$work/first.log"
    signal_run USR1 mpirun
    finish_run
    expect_status 75 "a stop inside the only prompt"
    checkpoint=$(sed -n 's/^checkpoint [0-9]*: prompt 0 at token \([0-9]*\) of 3000.*/\1/p' "$work/first.log")
    [ -n "$checkpoint" ] || fail "the stop wrote no checkpoint of the prompt"
    pipefill_mpi 2 "${args[@]}" --input "$work/in.h5" --output "$work/out.h5" --resume >"$work/resumed.log" ||
      { cat "$work/resumed.log"; fail "the resumed run failed"; }
    "$PYTHON" - "$work/out.h5" "$work/reference.h5" "$checkpoint" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f, h5py.File(sys.argv[2]) as ref:
    assert f["restored_tokens"][0] == int(sys.argv[3]), f["restored_tokens"][:]
    for name in ("token_logprobs", "topk_ids", "topk_logprobs", "nll_sum", "is_greedy", "score_start",
                 "token_set_logprobs", "token_set_ids"):
        exact = name in ("topk_ids", "is_greedy", "score_start", "token_set_ids")
        assert np.array_equal(f[name][:], ref[name][:], equal_nan=not exact), name + " differs"
    assert np.isnan(f["token_logprobs"][:200]).all() and (f["topk_ids"][:199] == -1).all()
    assert np.isnan(f["token_set_logprobs"][:199]).all() and np.isfinite(f["token_set_logprobs"][199:]).all()
print("stopped at token", sys.argv[3], "of a span from 200: scores bit-identical to the uninterrupted run")
PY
    ;;
  stop_inside_prompt_new_layout)
    # pp 2, then pp 1 x tp 2, then pp 2 again.
    stop_resume_across "2 --pp 2" "2 --tp 2" "2 --pp 2"
    rtol=1e-4 ;;
  stop_inside_prompt_cp)
    # pp 2 x cp 2 with --checkpoint-every (every chunk's rows gathered to CP rank 0 as they are
    # made), then cp 2 alone (the rows gathered at the stop), then pp 2 without CP.
    stop_resume_across "4 --pp 2 --cp 2 --checkpoint-every 0.2s" "2 --cp 2" "2 --pp 2"
    rtol=1e-4 ;;
  *) fail "unknown case $case" ;;
esac
[ -e "$work/out.h5" ] && [ ! -e "$work/out.h5.partial" ] || fail "the run did not complete the output"
"$bin/tests/compare_logits" "$work/out.h5" "$work/reference.h5" --rtol "${rtol:-1e-6}"
echo "Passed: $case"
