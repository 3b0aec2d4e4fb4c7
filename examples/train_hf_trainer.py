"""Train a tiny Llama with the Hugging Face ``Trainer`` on the CPU, metered by tensorledger.

    python examples/train_hf_trainer.py --steps 30 --logging-steps 5

The model is built from a config (random weights, nothing downloaded); the data are random
token ids.  ``install(trainer)`` adds the meter's callback: at every logging step the Trainer's
logs gain ``meter_mfu``, ``meter_tokens_per_s``, ``meter_step_time_s`` and the rest of
``Meter.metrics()``.  Needs the ``hf`` extra (transformers, and accelerate for the Trainer).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from typing import Any

import torch
from cpu_peak import example_hardware  # beside this script
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from tensorledger.bench.hf_callback import install


def tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    return LlamaForCausalLM(config)


def random_tokens(count: int, seq: int, vocab: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, vocab, (count, seq), generator=generator)
    return [{"input_ids": row, "labels": row} for row in rows]


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps")
    parser.add_argument("--logging-steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4, help="sequences per micro-batch")
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--accumulate", type=int, default=2, help="micro-batches per step")
    parser.add_argument("--hardware", help="catalog id, TOML file or 'local' (default: "
                        "the meter's choice for this device)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = tiny_llama()
    data = random_tokens(args.steps * args.batch * args.accumulate, args.seq, 128)
    hardware = example_hardware(args.hardware)
    with tempfile.TemporaryDirectory() as output_dir:
        training = TrainingArguments(
            output_dir=output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch,
            gradient_accumulation_steps=args.accumulate, logging_steps=args.logging_steps,
            learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
            disable_tqdm=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=training, train_dataset=data)
        install(trainer, hardware=hardware)
        trainer.train()
    logs = [entry for entry in trainer.state.log_history if "meter_mfu" in entry]
    for entry in logs:
        print(json.dumps({k: entry[k] for k in ("step", "loss", "meter_mfu", "meter_tokens_per_s",
                                                "meter_step_time_s", "meter_flops_per_step")
                          if k in entry}))
    return logs


if __name__ == "__main__":
    main()
