// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): a module-cache scan's walk over the models' attributes.
// Not a standalone header: it relies on the includes before it.

// --- the attributes a module-cache scan looks at ---------------------------------------------
//
// core/watch/module_cache.py looks, at the start of some steps, at every attribute of every
// module of the models for activations kept with their graph. Most attributes are nn.Module's
// own (`_parameters`, `_forward_hooks`, ...) or plain numbers: in Python, walking them cost
// 7 us a module (a 65-module transformer's scan 0.45 ms). module_cache.held_attributes is the
// definition and the fallback: the same modules, the same attributes, in the same order
// (tests/core/test_module_caches.py).

// The modules under each of `roots` (their `_modules` dicts, depth first in named_modules()'s
// order, each module once over all the roots, a None child skipped) and, in that order, the
// attributes of each one's __dict__ a kept activation could be in: a str name not starting
// with '_' whose value is an instance of one of the types `holders` (module_cache._HOLDERS:
// a type check, as isinstance without an __instancecheck__ of the type's own). Returns
// (modules, held), held's items (index into modules, name, value).
py::tuple held_attributes(const py::list& roots, const py::tuple& holders) {
  std::vector<PyTypeObject*> types;
  for (const py::handle& t : holders) {
    if (!PyType_Check(t.ptr())) {
      throw py::type_error("held_attributes: holders must be types");
    }
    types.push_back(reinterpret_cast<PyTypeObject*>(t.ptr()));
  }
  const auto held_by = [&types](PyObject* value) {
    for (PyTypeObject* t : types) {
      if (PyObject_TypeCheck(value, t)) {
        return true;
      }
    }
    return false;
  };
  std::unordered_set<PyObject*> looked;
  std::vector<PyObject*> stack;  // borrowed: each is held by its parent's dict or by roots
  py::list modules, held;
  for (const py::handle& root : roots) {
    stack.push_back(root.ptr());
    while (!stack.empty()) {
      PyObject* module = stack.back();
      stack.pop_back();
      if (!looked.insert(module).second) {
        continue;
      }
      const Py_ssize_t index = PyList_GET_SIZE(modules.ptr());
      modules.append(py::handle(module));  // (holds it from here on)
      // its __dict__ (vars()), a new reference; none for an object without one
      auto attrs = py::reinterpret_steal<py::object>(PyObject_GenericGetDict(module, nullptr));
      if (!attrs) {
        PyErr_Clear();
        continue;
      }
      PyObject* dict = attrs.ptr();
      if (!PyDict_Check(dict)) {
        continue;
      }
      PyObject *key, *value;
      Py_ssize_t i = 0;
      while (PyDict_Next(dict, &i, &key, &value)) {
        if (!PyUnicode_Check(key) ||
            (PyUnicode_GET_LENGTH(key) > 0 && PyUnicode_READ_CHAR(key, 0) == '_')) {
          continue;
        }
        if (held_by(value)) {
          held.append(py::make_tuple(index, py::handle(key), py::handle(value)));
        }
      }
      PyObject* children = PyDict_GetItemString(dict, "_modules");  // borrowed
      if (children == nullptr || !PyDict_Check(children)) {
        continue;
      }
      const size_t first = stack.size();
      i = 0;
      while (PyDict_Next(children, &i, &key, &value)) {
        if (value != Py_None) {
          stack.push_back(value);
        }
      }
      std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
    }
  }
  return py::make_tuple(modules, held);
}
