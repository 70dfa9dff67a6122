"""The student: its config, which teacher layers it starts from, and that initialisation.

DistilBERT starts its 6-layer student from every second layer of the 12-layer teacher: same
width, so embeddings, layers, pooler and head are copied as they are and only depth is cut. Here
the k-th, 2k-th, ... teacher layers (1 = the first layer above the embeddings, as hidden-state
indices count) are copied, spread evenly when the counts do not divide, so the teacher's top
layer, whose output the pooler and head were trained on, is always kept. A student of another
width (`--student-preset`) starts from random weights: nothing of the teacher fits it.
"""

from __future__ import annotations

import math
import re

import torch
from torch import nn

from bertkit.config import BertConfig
from bertkit.errors import UserError
from bertkit.model import BertModel

# Fields a student takes from its teacher whatever its shape: same tokenizer, positions and labels.
SHARED_FIELDS = ("vocab_size", "max_position_embeddings", "type_vocab_size", "pad_token_id", "id2label",
                 "problem_type", "layer_norm_eps")
_LAYER_KEY = re.compile(r"(^|\.)layers\.(\d+)\.")


def every_kth_layer(teacher_layers: int, student_layers: int) -> tuple[int, ...]:
    """Teacher layers (1-based) for the student's: k, 2k, ..., L when k = L / n is whole;
    otherwise the nearest layers to i * L / n, so the top layer is always the last one."""
    if not 1 <= student_layers <= teacher_layers:
        raise UserError(f"a student of {student_layers} layers cannot start from a teacher of {teacher_layers}")
    return tuple(math.floor((i + 1) * teacher_layers / student_layers + 0.5) for i in range(student_layers))


def student_config(teacher: BertConfig, preset: str | None = None, layers: int | None = None) -> BertConfig:
    """The teacher's shape (preset None or "teacher") or a named preset's, with the teacher's
    vocabulary, positions and labels; `layers` sets the depth (default: a quarter of the
    teacher's, rounded up, for the teacher's shape; the preset's own otherwise)."""
    if preset in (None, "teacher"):
        base = teacher
        depth = layers or max(1, math.ceil(teacher.num_hidden_layers / 4))
    else:
        base = BertConfig.preset(preset)
        depth = layers or base.num_hidden_layers
    shared = {name: getattr(teacher, name) for name in SHARED_FIELDS}
    try:
        return base.replace(**shared, num_hidden_layers=depth)
    except ValueError as e:
        raise UserError(f"bad student config: {e}") from None


def same_width(a: BertConfig, b: BertConfig) -> bool:
    return a.hidden_size == b.hidden_size


def new_like(teacher: nn.Module, config: BertConfig) -> nn.Module:
    """A freshly initialised model of the teacher's class (its head, or a bare encoder) for `config`."""
    if isinstance(teacher, BertModel):
        return BertModel(config, add_pooling_layer=teacher.pooler is not None)
    return type(teacher)(config)


def check_teacher_layers(layers: tuple[int, ...], teacher_layers: int, student_layers: int) -> None:
    """A UserError unless `layers` names one existing teacher layer (1-based) per student layer."""
    if len(layers) != student_layers:
        raise UserError(f"--teacher-layers names {len(layers)} layer(s) for a student of {student_layers}")
    if max(layers) > teacher_layers or min(layers) < 1:
        raise UserError(f"--teacher-layers {','.join(map(str, layers))}: the teacher's layers are 1..{teacher_layers}")


@torch.no_grad()
def init_from_teacher(student: nn.Module, teacher: nn.Module, layers: tuple[int, ...]) -> list[str]:
    """Copy into `student` every teacher tensor of the same name and shape, student layer j taking
    teacher layer layers[j] (1-based); returns the student's names that were not copied."""
    if not same_width(student.config, teacher.config):
        raise UserError(f"a student of width {student.config.hidden_size} cannot start from a teacher of "
                        f"width {teacher.config.hidden_size}")
    check_teacher_layers(layers, teacher.config.num_hidden_layers, student.config.num_hidden_layers)
    source = teacher.state_dict()
    target = student.state_dict()
    missing = []
    for name, tensor in target.items():
        from_name = _LAYER_KEY.sub(lambda m: f"{m.group(1)}layers.{layers[int(m.group(2))] - 1}.", name, count=1)
        value = source.get(from_name)
        if value is None or value.shape != tensor.shape:
            missing.append(name)
            continue
        tensor.copy_(value)
    return missing
