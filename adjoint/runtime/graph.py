"""Graphviz text for a tape: steps as boxes, arrays as ellipses.

An array is labelled with the parameter names it was bound to, its shape and
dtype; an edge goes array -> step for a read and step -> array for a write,
labelled with the parameter name. A buffer the tape kept for copy-on-write
is a dashed note pointing at the step whose backward reads it.
"""


def _quote(text):
    return text.replace("\\", "\\\\").replace('"', '\\"')


class _Namer:
    """Stable node ids and labels for the arrays of a tape."""

    def __init__(self):
        self.ids, self.names, self.roles, self.arrays = {}, {}, {}, []

    def node(self, a, name, is_param):
        """``is_param``: ``name`` is a kernel parameter (preferred over a copy's src/dest)."""
        if id(a) not in self.ids:
            self.ids[id(a)] = f"a{len(self.ids)}"
            self.names[id(a)], self.roles[id(a)] = [], []
            self.arrays.append(a)
        names = self.names[id(a)] if is_param else self.roles[id(a)]
        if name and name not in names:
            names.append(name)
        return self.ids[id(a)]

    def declarations(self):
        out = []
        for a in self.arrays:
            names = " / ".join(self.names[id(a)] or self.roles[id(a)]) or "array"
            grad = "\\nrequires_grad" if getattr(a, "requires_grad", False) else ""
            fill = "#fdf1d6" if grad else "#eeeeee"
            label = f"{_quote(names)}\\n{tuple(a.shape)} {a.dtype}{grad}"
            out.append(f'  {self.ids[id(a)]} [shape=ellipse, style=filled, fillcolor="{fill}", '
                       f'label="{label}"];')
        return out


def _edges(step):
    """[(array, parameter name, is_write, kept buffer or None)] of one step."""
    kernel = getattr(step, "kernel", None)
    if kernel is None:
        if hasattr(step, "dest"):
            return [(step.src, "src", False, None), (step.dest, "dest", True, None)] \
                if hasattr(step.src, "numpy") else [(step.dest, "dest", True, None)]
        return [(a, "", False, None) for a in step.arrays()]
    out = []
    for k, (p, a) in enumerate(zip(kernel.params, step.args)):
        if not hasattr(a, "numpy"):
            continue
        live = step.values[k] is a.numpy()
        if p.name in kernel.reads:
            out.append((a, p.name, False, None if live else step.values[k]))
        if p.name in kernel.writes:
            out.append((a, p.name, True, None))
    return out


def _step_label(k, step):
    kernel = getattr(step, "kernel", None)
    if kernel is not None:
        return f"#{k} {kernel.name}\\ndim={step.dims}"
    if hasattr(step, "dest"):
        kind = step.label.split(" ")[0]
        return f"#{k} {kind}\\n[{step.dest_offset}:+{step.count}] <- [{step.src_offset}:+{step.count}]"
    return f"#{k} {_quote(step.label)}"


def tape_to_dot(tape):
    lines = ["digraph tape {", "  rankdir=LR;", '  node [fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    namer, body = _Namer(), []
    for k, step in enumerate(tape.steps):
        sid = f"s{k}"
        body.append(f'  {sid} [shape=box, style=filled, fillcolor="#dde8f7", '
                    f'label="{_step_label(k, step)}"];')
        for a, name, is_write, kept in _edges(step):
            node = namer.node(a, name, getattr(step, "kernel", None) is not None)
            if is_write:
                body.append(f'  {sid} -> {node} [label="{name}"];')
            elif kept is None:
                body.append(f'  {node} -> {sid} [label="{name}"];')
            else:
                kid = f"k{k}_{name}"
                body.append(f'  {kid} [shape=note, style=dashed, label="kept copy of {name}\\n'
                            f'{kept.nbytes} bytes"];')
                body.append(f'  {node} -> {kid} [style=dashed, label="before overwrite"];')
                body.append(f'  {kid} -> {sid} [label="{name}"];')
    lines += namer.declarations() + body
    lines.append("}")
    return "\n".join(lines) + "\n"
