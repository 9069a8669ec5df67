#!/usr/bin/env bash
# Shared settings of the SkillDuet recipes (Qwen3-4B, one node of 8 GPUs by default). Sourced, not run.
#
# Environment variables (all optional):
#   MODEL_PATH      policy model (default Qwen/Qwen3-4B)
#   DATA_ROOT       parquet datasets from `python -m skillduet_plugin.integrations.verl.data` (default ~/data/skillduet)
#   ENV_DATA_DIR    benchmark data folder passed to the environment (default: the env's own default)
#   ANALYZER_URL    OpenAI-compatible analyzer/synthesizer server (default http://127.0.0.1:8000/v1)
#   ANALYZER_MODEL  served model name (default Qwen/Qwen3-32B; the paper uses a ~27B analyzer)
#   N_GPUS NNODES   GPUs per node / nodes (default 8 / 1)
#   ROLLOUT         vllm | sglang (default vllm)
#   MAX_TURNS       skillduet.env.max_turns (default: WebShop 15, ALFWorld the package's default)
#   PROJECT EXP     logger project / experiment names
#   DRY_RUN=1       compose, validate and print the full config, then exit 0 (no GPU, no Ray)
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B}
DATA_ROOT=${DATA_ROOT:-$HOME/data/skillduet}
ANALYZER_URL=${ANALYZER_URL:-http://127.0.0.1:8000/v1}
ANALYZER_MODEL=${ANALYZER_MODEL:-Qwen/Qwen3-32B}
N_GPUS=${N_GPUS:-8}
NNODES=${NNODES:-1}
ROLLOUT=${ROLLOUT:-vllm}
PROJECT=${PROJECT:-skillduet}
PYTHON=${PYTHON:-python3}

# env-specific lengths: one episode is one conversation (observations are masked response tokens)
skillduet_env_args() {
    local env=$1
    case "$env" in
        # ALFWorld plays the package's defaults for the turns (skillduet.env.*, docs/configuration.md)
        alfworld) PROMPT_LEN=${PROMPT_LEN:-4096}; RESPONSE_LEN=${RESPONSE_LEN:-16384} ;;
        webshop)  MAX_TURNS=${MAX_TURNS:-15}; PROMPT_LEN=${PROMPT_LEN:-4096}; RESPONSE_LEN=${RESPONSE_LEN:-8192} ;;
        *) echo "unknown env '$env' (alfworld|webshop)" >&2; return 2 ;;
    esac
    ENV_ARGS=(
        data.train_files="$DATA_ROOT/$env/train.parquet"
        data.val_files="$DATA_ROOT/$env/test.parquet"
        data.train_batch_size=16
        data.val_batch_size=128
        data.max_prompt_length=$PROMPT_LEN
        data.max_response_length=$RESPONSE_LEN
        data.filter_overlong_prompts=False
        data.truncation=error
        skillduet.env.name=$env
    )
    if [[ -n "${MAX_TURNS:-}" ]]; then ENV_ARGS+=(skillduet.env.max_turns="$MAX_TURNS"); fi
    if [[ -n "${ENV_DATA_DIR:-}" ]]; then ENV_ARGS+=(skillduet.env.data_dir="$ENV_DATA_DIR"); fi
}

# verl settings shared by every recipe (GRPO, n=8, KL loss, FSDP2)
BASE_ARGS=(
    trainer.plugins=[skillduet]
    algorithm.adv_estimator=grpo
    algorithm.use_kl_in_reward=False
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.strategy=fsdp2
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=16
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=32768
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.01
    actor_rollout_ref.actor.kl_loss_type=low_var_kl
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.loss_agg_mode=token-mean
    actor_rollout_ref.actor.fsdp_config.param_offload=False
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
    actor_rollout_ref.ref.strategy=fsdp2
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=32768
    actor_rollout_ref.ref.fsdp_config.param_offload=True
    actor_rollout_ref.rollout.name=$ROLLOUT
    actor_rollout_ref.rollout.mode=async
    actor_rollout_ref.rollout.n=8
    actor_rollout_ref.rollout.temperature=1.0
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=32768
    actor_rollout_ref.rollout.val_kwargs.temperature=0.4
    actor_rollout_ref.rollout.val_kwargs.do_sample=True
    actor_rollout_ref.rollout.val_kwargs.n=1
    skillduet.analyzer.kind=openai
    skillduet.analyzer.base_url="$ANALYZER_URL"
    skillduet.analyzer.model="$ANALYZER_MODEL"
    skillduet.synthesizer.kind=openai
    skillduet.synthesizer.base_url="$ANALYZER_URL"
    skillduet.synthesizer.model="$ANALYZER_MODEL"
    trainer.logger=[console,wandb]
    trainer.project_name="$PROJECT"
    trainer.n_gpus_per_node=$N_GPUS
    trainer.nnodes=$NNODES
    trainer.save_freq=10
    trainer.test_freq=10
    trainer.total_training_steps=150
    trainer.total_epochs=1000
    trainer.val_before_train=True
)

# run_recipe <env> <experiment name> [extra overrides...]; extra CLI args of the script come last and win.
run_recipe() {
    local env=$1 exp=$2
    shift 2
    skillduet_env_args "$env"
    local dry=()
    # a dry run leaves nothing behind (no hydra outputs/ folder)
    if [[ -n "${DRY_RUN:-}" && "${DRY_RUN}" != 0 ]]; then dry=(hydra.output_subdir=null hydra.run.dir=. hydra/job_logging=none hydra/hydra_logging=none); fi
    "$PYTHON" -m skillduet_plugin.main_ppo \
        "${BASE_ARGS[@]}" "${ENV_ARGS[@]}" \
        trainer.experiment_name="${EXP:-$exp}" \
        trainer.default_local_dir="${CKPT_ROOT:-checkpoints}/$PROJECT/${EXP:-$exp}" \
        "${dry[@]}" "$@"
}
