# A gdb pretty-printer for tf::Tensor<T> (transformer.hpp): `p X` prints the shape and the first
# rows and columns instead of std::vector's allocator internals:
#
#     (gdb) p X
#     $1 = Tensor<float> 3x8 = {
#       [-0.02346,  0.01122, 0.04396, 0.03496,    0.03573, -0.00716,  0.05013, -0.03223],
#       [ 0.01454, -0.01409, 0.06793, 0.03209,    0.03583, -0.03545,  0.02854, -0.03917],
#       [ 0.03023,  0.04625,  0.0156, 0.01722, -0.0004857, -0.01327, -0.02248,  0.01813]}
#
# Load it with `source gdb_tensor.py` in gdb, or start gdb as `gdb -x gdb_tensor.py --args ...`
# (docs/teaching.md, "Stepping through in a debugger"). `p X.shape` and `p X.data` print the
# members as before; `p/r X` prints the raw struct.
import gdb
import gdb.printing
import gdb.types

MAX_ROWS = 6  # rows shown; a last line "..." stands for the rest
MAX_COLS = 8  # values shown per row; ", ..." stands for the rest
MI_MAX_ROWS = 100  # rows listed in a front end's variables view (VS Code), each with all its values


def vector_bounds(vec):
    """A std::vector's first element (a pointer) and its element count; gdb.error if it is garbage."""
    try:  # libstdc++ (g++, and clang++ on Linux)
        impl = vec["_M_impl"]
        start, finish, end = impl["_M_start"], impl["_M_finish"], impl["_M_end_of_storage"]
    except gdb.error:  # libc++
        start, finish, end = vec["__begin_"], vec["__end_"], vec["__end_cap_"]["__value_"]
    if not start <= finish <= end:
        raise gdb.error("not a vector")
    return start, int(finish - start)


class TensorPrinter:
    """`Tensor<float> 3x8` (the shape as shape_str writes it), then the first rows as children.

    Where gdb summarises a value (a frame's arguments at a breakpoint, `bt`) it shows the header
    alone: LayerNorm (X=Tensor<float> 3x8 = {...}, gamma=Tensor<float> 8 = {...}, ...). Values
    have 4 significant digits, as `explain` prints them."""

    def __init__(self, val):
        self.val = val
        self.name = gdb.types.get_basic_type(val.type).tag.replace("tf::", "", 1)  # Tensor<float>
        self.header = None  # set by to_string

    def layout(self):
        """(shape, data, rows, cols), or why the tensor cannot be shown: "(invalid shape)", ..."""
        # A tensor not constructed yet (a local before its line) holds garbage: every size is
        # checked before a number is read, and the callers read a few rows at most.
        try:
            shape_at, ndims = vector_bounds(self.val["shape"])
            data, size = vector_bounds(self.val["data"])
            if ndims == 0 and size == 0:
                return "(empty, no shape)"
            if ndims not in (1, 2):  # {H} or {rows, cols}
                return "(invalid shape)"
            shape = [int(shape_at[k]) for k in range(ndims)]
        except (gdb.error, gdb.MemoryError):
            return "(invalid shape)"
        rows, cols = (shape[0], shape[1]) if ndims == 2 else (1, shape[0])
        if rows < 0 or cols < 0 or rows * cols != size:
            return "(invalid shape)"
        return shape, data, rows, cols

    def header_and_lines(self):
        """The header and one line per row shown, as the command line prints them."""
        got = self.layout()
        if isinstance(got, str):
            return self.name + " " + got, []
        shape, data, rows, cols = got
        header = self.name + " " + "x".join(str(d) for d in shape)
        try:
            values = [["%.4g" % float(data[i * cols + j]) for j in range(min(cols, MAX_COLS))]
                      for i in range(min(rows, MAX_ROWS))]
        except (gdb.error, gdb.MemoryError):
            return header + " (values unreadable)", []
        if rows == 0 or cols == 0:
            return header, []
        widths = [max(len(row[j]) for row in values) for j in range(len(values[0]))]  # columns aligned
        more = ", ..." if cols > MAX_COLS else ""
        lines = ["[" + ", ".join(v.rjust(w) for v, w in zip(row, widths)) + more + "]" for row in values]
        if rows > MAX_ROWS:
            lines.append("...")
        return header, lines

    def to_string(self):
        if self.header is None:
            self.header, self.lines = self.header_and_lines()
        return self.header

    def children(self):
        if self.header is None:
            # A front end on gdb/MI (VS Code's variables) asks for the children without calling
            # to_string, and would show a string as an array of characters: there the children
            # are the shape and the rows themselves, each an array of values to expand.
            return self.mi_children()
        # The command line (print, info locals, finish) calls to_string first. gdb prints each
        # child string as it is, after " = {" and between ", ": a newline and an indent put each
        # row on a line of its own (`set print array on` does that itself).
        start = "" if gdb.parameter("print array") else "\n  "
        return (("[%d]" % i, start + line) for i, line in enumerate(self.lines))

    def mi_children(self):
        got = self.layout()
        if isinstance(got, str):
            return
        shape, data, rows, cols = got
        yield "shape", self.val["shape"]
        if cols > 0:
            row = data.type.strip_typedefs().target().array(cols - 1).pointer()  # T (*)[cols]
            for i in range(min(rows, MI_MAX_ROWS)):
                yield "[%d]" % i, (data + i * cols).cast(row).dereference()

    def display_hint(self):
        return "array"  # children without names: {row, row, ...}


def build_printer():
    printer = gdb.printing.RegexpCollectionPrettyPrinter("transformer")
    printer.add_printer("Tensor", "^tf::Tensor<.*>$", TensorPrinter)
    return printer


# replace=True: loading the file a second time (again by hand, or by VS Code's setup) is harmless.
gdb.printing.register_pretty_printer(None, build_printer(), replace=True)
