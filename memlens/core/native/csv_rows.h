// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): a run folder's CSV rows as text, formatted with the GIL let go.
// Not a standalone header: it relies on the includes and the helpers before it.

// --- CSV rows without the GIL ----------------------------------------------------------------
//
// A watch's writer thread turns each step's values into steps.csv's and memory.csv's text.
// Its Python is the training thread's time: the training thread lets the GIL go in every
// op, the writer takes it then, and the training thread waits for it to come back (steps
// overlapping a 1.07 ms batch of Python took 1.1 ms longer; yielding every 50 us changed
// nothing). Here the values are read with the GIL held (a few microseconds a batch) and
// formatted without it. core/runfolder/format.py's steps_row and memory_row are the
// definition and the fallback: the same text, cell for cell (tests/core/test_csv_rows.py).

// 'f' values at least this large go to Python: "%.6f" of one writes all its integer digits,
// more than format_rows' buffer holds (a step's time_s is seconds: far below it)
constexpr double kMaxFixed = 1e40;

struct CsvCell {
  double d;
  long long i;
  char tag;  // 'n' none (None, NaN), 'i' an integer, 'd' a float
};

// The rows (sequences of int, float or None) formatted per `kinds`, one character a column:
// 'i' an integer (a float cut toward zero), 'g' 6 significant digits, 'f' 6 decimals, 'p'
// an index into `names`, '-' a column left out; None or NaN is an empty cell ('f': "nan").
// Each row ends in "\r\n" (the csv module's default). None where a value is of another
// type or cannot be written so (a row of another length, an integer column's infinity or
// a float past 2**63, a 6-decimal column's value past kMaxFixed, a name's index out of
// range): the caller formats those rows in
// Python, which writes or raises what it does.
py::object format_rows(const py::list& rows, const std::string& kinds, const py::tuple& names) {
  const size_t width = kinds.size();
  std::vector<CsvCell> cells;
  cells.reserve(rows.size() * width);
  for (const py::handle& row : rows) {
    PyObject* seq = PySequence_Fast(row.ptr(), "a row");
    if (seq == nullptr) {
      PyErr_Clear();
      return py::none();
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    bool ok = n == static_cast<Py_ssize_t>(width);
    for (Py_ssize_t c = 0; ok && c < n; ++c) {
      PyObject* v = PySequence_Fast_GET_ITEM(seq, c);
      const char kind = kinds[c];
      CsvCell cell{0.0, 0, 'n'};
      if (v == Py_None) {
        ok = kind != 'p';
      } else if (PyLong_Check(v)) {
        int overflow = 0;
        cell.i = PyLong_AsLongLongAndOverflow(v, &overflow);
        cell.d = static_cast<double>(cell.i);
        cell.tag = 'i';
        ok = overflow == 0 && !(cell.i == -1 && PyErr_Occurred());
      } else if (PyFloat_Check(v)) {
        cell.d = PyFloat_AS_DOUBLE(v);
        cell.tag = std::isnan(cell.d) ? 'n' : 'd';
        if ((kind == 'i' || kind == 'p') && cell.tag == 'd') {
          ok = std::fabs(cell.d) < 9.2e18;  // (NaN: an empty cell; inf: Python raises)
          cell.i = ok ? static_cast<long long>(cell.d) : 0;
        }
        if (kind == 'f' && cell.tag == 'n') {
          cell.tag = 'd';  // Python writes "nan" with 6 decimals
        }
        if (kind == 'f' && std::fabs(cell.d) >= kMaxFixed) {
          ok = false;  // (its integer digits alone would not fit the buffer below)
        }
      } else {
        ok = false;
      }
      if (ok && kind == 'p') {
        ok = cell.tag != 'n' && cell.i >= 0 && cell.i < static_cast<long long>(names.size());
      }
      cells.push_back(cell);
    }
    Py_DECREF(seq);
    if (!ok) {
      PyErr_Clear();
      return py::none();
    }
  }
  std::vector<std::string> labels;
  for (const py::handle& name : names) {
    labels.push_back(py::cast<std::string>(name));
  }
  std::string out;
  {
    py::gil_scoped_release no_gil;
    out.reserve(cells.size() * 8);
    char buf[64];
    for (size_t r = 0; r * width < cells.size(); ++r) {
      bool first = true;
      for (size_t c = 0; c < width; ++c) {
        const char kind = kinds[c];
        if (kind == '-') {
          continue;
        }
        if (!first) {
          out += ',';
        }
        first = false;
        const CsvCell& cell = cells[r * width + c];
        if (cell.tag == 'n') {
          continue;
        }
        int len = 0;
        if (kind == 'i') {
          len = std::snprintf(buf, sizeof buf, "%lld", cell.i);
        } else if (kind == 'p') {
          out += labels[static_cast<size_t>(cell.i)];
        } else if (kind == 'f' && std::isnan(cell.d)) {
          out += "nan";
        } else {
          len = std::snprintf(buf, sizeof buf, kind == 'f' ? "%.6f" : "%.6g", cell.d);
        }
        out.append(buf, static_cast<size_t>(std::max(len, 0)));
      }
      out += "\r\n";
    }
  }
  return py::str(out);
}
