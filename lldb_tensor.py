# An lldb formatter for tf::Tensor<T> (transformer.hpp), lldb's counterpart of gdb_tensor.py: `p X`
# prints the shape and the first rows and columns instead of std::vector's allocator internals:
#
#     (lldb) p X
#     (const tf::Tensor<float>) $0 = Tensor<float> 3x8 = {
#       [-0.02346,  0.01122, 0.04396, 0.03496,    0.03573, -0.00716,  0.05013, -0.03223],
#       [ 0.01454, -0.01409, 0.06793, 0.03209,    0.03583, -0.03545,  0.02854, -0.03917],
#       [ 0.03023,  0.04625,  0.0156, 0.01722, -0.0004857, -0.01327, -0.02248,  0.01813]}
#
# Load it with `command script import lldb_tensor.py` in lldb, or start lldb as
# `lldb -o 'command script import lldb_tensor.py' -- ./transformer-debug ...`; to load it whenever
# lldb starts, put `command script import /path/to/the/project/lldb_tensor.py` in ~/.lldbinit
# (docs/teaching.md, "Stepping through in a debugger"). It reads the vectors of libstdc++ (g++, and
# clang++ on Linux) and of libc++ (clang++ on macOS). `p X.shape` and `p X.data` print the members
# as before; `frame variable --raw X` prints the raw struct.
#
# Two views, chosen by the command `tensor-view`:
# - `tensor-view lines` (the default, for the command line): the summary is the header and the
#   rows, as above, and the tensor has no children. A reference (a function's argument such as
#   LayerNorm's X) shows the header alone, so the line where lldb stops and `bt` stay one line a
#   frame: `LayerNorm<float>(X=Tensor<float> 3x8, ...)`; `p X` or `frame variable *X` print its rows.
# - `tensor-view tree` (for a front end such as VS Code, whose variables view shows a summary on one
#   line and the children as a tree): the summary is the header alone and the children are `shape`
#   and the rows (up to TREE_MAX_ROWS), each an array of all its values to expand.
import struct

import lldb

MAX_ROWS = 6  # rows shown; a last line "..." stands for the rest
MAX_COLS = 8  # values shown per row; ", ..." stands for the rest
TREE_MAX_ROWS = 100  # rows listed as children in `tensor-view tree`
VIEW = {"tree": False}  # set by the command tensor-view

TYPE_REGEX = "^tf::Tensor<.+>$"


class Garbage(Exception):
    """A vector or a shape that cannot be a tensor's (a tensor not constructed yet holds garbage)."""


def member(value, *names):
    """The first of the members `names` that `value` has (base classes searched), or None."""
    for name in names:
        child = value.GetChildMemberWithName(name)
        if child.IsValid():
            return child
    return None


def pointer_of(value):
    """The address a pointer member holds; a member that wraps it (libc++'s compressed pair) is opened."""
    while value is not None and not value.GetType().GetCanonicalType().IsPointerType():
        value = member(value, "__value_")
    if value is None:
        raise Garbage("not a pointer")
    error = lldb.SBError()
    address = value.GetValueAsUnsigned(error, 0)
    if error.Fail():
        raise Garbage(error.GetCString())
    return address


def vector_pointers(vec):
    """A std::vector's three pointers: its first element, its end and the end of its storage."""
    pointer_size = vec.GetTarget().GetAddressByteSize()
    data = vec.GetData()
    if data.GetByteSize() == 3 * pointer_size:
        # Both libstdc++ and libc++ lay a vector with an empty allocator out as these three pointers.
        # They are read from its bytes rather than its members: in a value that `p` computed, lldb
        # 14 gives a libstdc++ vector with a custom allocator an implementation class without members.
        error = lldb.SBError()
        pointers = [data.GetAddress(error, k * pointer_size) for k in range(3)]
        if error.Fail():
            raise Garbage(error.GetCString())
        return pointers
    impl = member(vec, "_M_impl")  # another layout: its members by name
    if impl is not None:  # libstdc++
        named = [member(impl, n) for n in ("_M_start", "_M_finish", "_M_end_of_storage")]
    else:  # libc++: the end of the storage is __end_cap_ (a compressed pair) or, in newer ones, __cap_
        named = [member(vec, "__begin_"), member(vec, "__end_"), member(vec, "__cap_", "__end_cap_")]
    return [pointer_of(p) for p in named]


def vector_bounds(vec):
    """A std::vector's first element (an address), its element count and its element type; Garbage
    if the pointers cannot be a vector's."""
    vec = vec.GetNonSyntheticValue()  # lldb's own std::vector formatter hides the members
    element = vec.GetType().GetCanonicalType().GetTemplateArgumentType(0)
    size = element.GetByteSize() if element.IsValid() else 0
    first, last, limit = vector_pointers(vec)
    if size == 0 or not first <= last <= limit or (last - first) % size != 0:
        raise Garbage("not a vector")
    return first, (last - first) // size, element


STRUCT_CODES = {  # how struct reads one value of each basic type
    lldb.eBasicTypeFloat: "f", lldb.eBasicTypeDouble: "d",
    lldb.eBasicTypeInt: "i", lldb.eBasicTypeUnsignedInt: "I",
    lldb.eBasicTypeLong: "q", lldb.eBasicTypeUnsignedLong: "Q",
    lldb.eBasicTypeLongLong: "q", lldb.eBasicTypeUnsignedLongLong: "Q",
}


def read_values(process, address, element, count):
    """`count` values of type `element` from `address`, as Python numbers; Garbage if unreadable."""
    code = STRUCT_CODES.get(element.GetCanonicalType().GetBasicType())
    size = element.GetByteSize()
    if code is None or struct.calcsize(code) != size:
        raise Garbage("a value type this formatter does not read")
    if count == 0:
        return []
    error = lldb.SBError()
    data = process.ReadMemory(address, count * size, error)
    if error.Fail() or data is None or len(data) != count * size:
        raise Garbage("unreadable")
    order = "<" if process.GetByteOrder() == lldb.eByteOrderLittle else ">"
    return list(struct.unpack(order + code * count, data))


def tensor_name(valobj):
    """Tensor<float>: the type without its namespace, const and reference."""
    t = valobj.GetType()
    if t.IsReferenceType():
        t = t.GetDereferencedType()
    return t.GetUnqualifiedType().GetCanonicalType().GetName().replace("tf::", "", 1)


def layout(valobj):
    """(shape, address of the values, their type, rows, cols), or why the tensor cannot be shown."""
    # Every size is checked before a number is read, and the callers read a few rows at most.
    raw = valobj.GetNonSyntheticValue()
    shape_vec, data_vec = member(raw, "shape"), member(raw, "data")
    if shape_vec is None or data_vec is None:
        return "(invalid shape)"
    try:
        shape_at, ndims, shape_type = vector_bounds(shape_vec)
        data, size, element = vector_bounds(data_vec)
        if ndims == 0 and size == 0:
            return "(empty, no shape)"
        if ndims not in (1, 2):  # {H} or {rows, cols}
            return "(invalid shape)"
        shape = read_values(raw.GetProcess(), shape_at, shape_type, ndims)
    except Garbage:
        return "(invalid shape)"
    rows, cols = (shape[0], shape[1]) if ndims == 2 else (1, shape[0])
    if rows < 0 or cols < 0 or rows * cols != size:
        return "(invalid shape)"
    return shape, data, element, rows, cols


def header_and_lines(valobj):
    """The header and one line per row shown, as the command line prints them (4 significant digits)."""
    name = tensor_name(valobj)
    got = layout(valobj)
    if isinstance(got, str):
        return name + " " + got, []
    shape, data, element, rows, cols = got
    header = name + " " + "x".join(str(d) for d in shape)
    if rows == 0 or cols == 0:
        return header, []
    shown = min(cols, MAX_COLS)
    try:
        row_bytes = cols * element.GetByteSize()
        values = [["%.4g" % v for v in read_values(valobj.GetProcess(), data + i * row_bytes, element, shown)]
                  for i in range(min(rows, MAX_ROWS))]
    except Garbage:
        return header + " (values unreadable)", []
    widths = [max(len(row[j]) for row in values) for j in range(shown)]  # columns aligned
    more = ", ..." if cols > MAX_COLS else ""
    lines = ["[" + ", ".join(v.rjust(w) for v, w in zip(row, widths)) + more + "]" for row in values]
    if rows > MAX_ROWS:
        lines.append("...")
    return header, lines


def tensor_summary(valobj, internal_dict):
    """`type summary add -F`: "Tensor<float> 3x8 = {" and the rows, or the header alone (above)."""
    header, lines = header_and_lines(valobj)
    if VIEW["tree"] or valobj.GetType().IsReferenceType() or not lines:
        return header
    return header + " = {\n  " + ",\n  ".join(lines) + "}"


class TensorChildren:
    """`type synthetic add -l`: no children in `tensor-view lines`; in `tensor-view tree`, `shape`
    and the rows [0], [1], ..., each an array T[cols] of the row's values."""

    def __init__(self, valobj, internal_dict):
        self.valobj = valobj
        self.children = None  # made when first asked for, in the tree view

    def update(self):
        self.children = None
        return False  # the children are made again at each stop

    def make_children(self):
        self.children = []
        got = layout(self.valobj)
        if isinstance(got, str):
            return
        shape, data, element, rows, cols = got
        raw = self.valobj.GetNonSyntheticValue()
        self.children.append(member(raw, "shape"))
        if cols > 0:
            row_type = element.GetArrayType(cols)
            for i in range(min(rows, TREE_MAX_ROWS)):
                address = data + i * cols * element.GetByteSize()
                self.children.append(raw.CreateValueFromAddress("[%d]" % i, address, row_type))

    def num_children(self):
        if not VIEW["tree"]:  # tensor-view takes effect at once
            return 0
        if self.children is None:
            self.make_children()
        return len(self.children)

    def has_children(self):
        return self.num_children() > 0

    def get_child_index(self, name):
        if name == "shape" and self.children:
            return 0
        if name.startswith("[") and name.endswith("]") and name[1:-1].isdigit():
            return int(name[1:-1]) + 1
        return -1

    def get_child_at_index(self, index):
        return self.children[index] if 0 <= index < self.num_children() else None


def tensor_view(debugger, command, result, internal_dict):
    """tensor-view lines|tree: rows in the summary (the command line), or a tree of children (an IDE).
    A value lldb has shown already keeps its children until the next stop."""
    choice = command.strip()
    if choice not in ("lines", "tree"):
        result.SetError("tensor-view takes lines (the rows in p's output) or tree (shape and rows as "
                        "children), not '%s'" % choice)
        return
    VIEW["tree"] = choice == "tree"
    if not run_quietly(debugger, summary_command(VIEW["tree"])):
        result.SetError("tensor-view: the summary could not be added again")
        return
    result.AppendMessage("tensors: the %s view" % choice)


def run_quietly(debugger, command):
    """Runs an lldb command; True if it succeeded (its output is dropped)."""
    result = lldb.SBCommandReturnObject()
    debugger.GetCommandInterpreter().HandleCommand(command, result)
    return result.Succeeded()


def summary_command(tree):
    """The command that adds the summary: -e in the tree view (p lists the children too); -h: no
    empty {} after a summary in the lines view."""
    expand = "-e " if tree else ""
    return 'type summary add -w transformer %s-h -x "%s" -F %s.tensor_summary' % (
        expand, TYPE_REGEX, __name__)


def __lldb_init_module(debugger, internal_dict):
    # Importing the file a second time (again by hand, or by an IDE's setup) replaces the formatters.
    module = __name__
    for command in (summary_command(VIEW["tree"]),
                    'type synthetic add -w transformer -x "%s" -l %s.TensorChildren' % (TYPE_REGEX, module),
                    "type category enable transformer"):
        if not run_quietly(debugger, command):
            print("lldb_tensor.py: '%s' failed" % command)
    add = ("command script add -h 'tensor-view lines|tree: how Tensor<T> is shown' "
           "-f %s.tensor_view tensor-view" % module)
    if not run_quietly(debugger, add.replace("add ", "add -o ", 1)):  # -o (replace) is newer than lldb 14
        run_quietly(debugger, add)
