"""Graphviz text for a tape: steps as boxes, arrays as ellipses."""


def tape_to_dot(tape):
    lines = ["digraph tape {", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    ids = {}

    def arr(a):
        if id(a) not in ids:
            ids[id(a)] = f"a{len(ids)}"
            grad = "\\nrequires_grad" if getattr(a, "requires_grad", False) else ""
            lines.append(f'  {ids[id(a)]} [shape=ellipse, label="array {tuple(a.shape)}{grad}"];')
        return ids[id(a)]

    for k, step in enumerate(tape.steps):
        sid = f"s{k}"
        kernel = getattr(step, "kernel", None)
        label = f"#{k} {kernel.name}" if kernel is not None else f"#{k} {type(step).__name__}"
        lines.append(f'  {sid} [shape=box, style=filled, fillcolor="#dde8f7", label="{label}"];')
        written = {id(a) for a in step.writes()}
        for a in step.arrays():
            if id(a) in written:
                lines.append(f"  {sid} -> {arr(a)};")
            else:
                lines.append(f"  {arr(a)} -> {sid};")
    lines.append("}")
    return "\n".join(lines) + "\n"
