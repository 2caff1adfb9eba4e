// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): the saved-tensor pack/unpack hooks and what they keep alive.
// Not a standalone header: it relies on the includes and the helpers before it.

// --- activations saved for backward: pack/unpack hooks without a Python frame --------------
//
// What core.memory.SavedTensorTracker does in Python, with the same figures: autograd calls
// the pack hook for every tensor it saves and unpack when backward needs it. pack keeps the
// tensor (or, for one with autograd history, a detached alias) and its version in a small
// holder (autograd stores the holder); unpack raises autograd's own in-place error if the
// version moved, since a pack hook turns autograd's check off. Each holder counts its storage once while it lives; its dealloc
// (when autograd lets go: backward, or a dropped graph) takes it off. Parameters (by data
// pointer) are checked but never counted. All of it runs with the GIL held.

class SavedTracker;

struct SavedHolder {
  PyObject_HEAD
  at::Tensor tensor;   // a detached alias sharing the version counter (placement-new)
  PyObject* wrapped;   // its Python tensor: the one packed, or made at the first unpack
  PyObject* owner;     // the capsule that keeps `tracker` alive
  SavedTracker* tracker;
  int64_t version;
  int64_t device;
  int64_t ptr;
  int64_t step;        // the tracker's step when packed
  bool counted;
};

PyTypeObject SavedHolderType;

class SavedTracker {
 public:
  struct Entry {
    int64_t fresh = 0;     // holders packed in the current step
    int64_t retained = 0;  // holders that outlived the step that made them
    int64_t nbytes = 0;
    int64_t counted_step = -1;  // the step whose saved bytes already include it
  };

  // Data pointers of the parameters and their storages' base pointers: a tensor starting at
  // one, or in one's storage, is a parameter, never an activation.
  void set_param_ptrs(const std::vector<int64_t>& ptrs) {
    param_ptrs_.clear();
    param_ptrs_.insert(ptrs.begin(), ptrs.end());
  }

  void add(SavedHolder* h, int64_t nbytes) {
    Entry& e = live_[Key{h->device, h->ptr}];
    if (e.fresh + e.retained == 0) {
      e.nbytes = nbytes;
      live_bytes_ += nbytes;
    }
    e.fresh += 1;
    if (e.counted_step != step_) {
      e.counted_step = step_;
      step_saved_bytes_ += e.nbytes;
    }
    h->step = step_;
    h->counted = true;
  }

  void release(SavedHolder* h) {
    h->counted = false;
    auto it = live_.find(Key{h->device, h->ptr});
    if (it == live_.end()) {
      return;
    }
    Entry& e = it->second;
    if (h->step == step_) {
      e.fresh -= 1;
    } else if (--e.retained == 0) {
      retained_bytes_ -= e.nbytes;
    }
    if (e.fresh + e.retained == 0) {
      live_bytes_ -= e.nbytes;
      live_.erase(it);
    }
  }

  void new_step() {
    end_step();
    step_saved_bytes_ = 0;
  }

  // Holders autograd still has after the step are a retained graph. (After backward the
  // live set is empty or holds only what a kept graph saved: a short walk.)
  void end_step() {
    for (auto& kv : live_) {
      Entry& e = kv.second;
      if (e.fresh > 0) {
        if (e.retained == 0) {
          retained_bytes_ += e.nbytes;
        }
        e.retained += e.fresh;
        e.fresh = 0;
      }
    }
    step_ += 1;
  }

  bool is_param(int64_t ptr) const { return param_ptrs_.count(ptr) != 0; }
  bool contains(int64_t device, int64_t ptr) const { return live_.count(Key{device, ptr}) != 0; }
  int64_t live_bytes() const { return live_bytes_; }
  int64_t retained_bytes() const { return retained_bytes_; }
  int64_t step_saved_bytes() const { return step_saved_bytes_; }

  std::vector<std::pair<int64_t, int64_t>> keys() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    out.reserve(live_.size());
    for (const auto& kv : live_) {
      out.emplace_back(kv.first.device, kv.first.ptr);
    }
    return out;
  }

 private:
  std::unordered_set<int64_t> param_ptrs_;
  std::unordered_map<Key, Entry, KeyHash> live_;
  int64_t step_ = 0;
  int64_t live_bytes_ = 0;
  int64_t retained_bytes_ = 0;
  int64_t step_saved_bytes_ = 0;
};

void saved_holder_dealloc(PyObject* self) {
  auto* h = reinterpret_cast<SavedHolder*>(self);
  if (h->counted && h->tracker != nullptr) {
    h->tracker->release(h);
  }
  h->tensor.~Tensor();
  Py_XDECREF(h->wrapped);
  Py_XDECREF(h->owner);
  Py_TYPE(self)->tp_free(self);
}

const char* kCapsule = "memlens_native.SavedTracker";

// pack(tensor) -> holder. `self` is a capsule holding the tracker.
PyObject* saved_pack(PyObject* self, PyObject* arg) {
  try {
    if (!THPVariable_Check(arg)) {
      PyErr_SetString(PyExc_TypeError, "pack hook: expected a tensor");
      return nullptr;
    }
    const at::Tensor& t = THPVariable_Unpack(arg);
    auto* tracker = static_cast<std::shared_ptr<SavedTracker>*>(
        PyCapsule_GetPointer(self, kCapsule))->get();
    auto* h = PyObject_New(SavedHolder, &SavedHolderType);
    if (h == nullptr) {
      return nullptr;
    }
    if (!t.requires_grad()) {
      // Most saved tensors (an op's inputs) reach the hook already detached by autograd: no
      // history, so keeping this very object makes no cycle, and unpack hands it back
      // without making another Python tensor.
      new (&h->tensor) at::Tensor(t);
      Py_INCREF(arg);
      h->wrapped = arg;
    } else {
      // A tensor saved as the output of its own op still points at the node being built:
      // keeping it would make the node hold itself. tensor_data() is an alias without
      // autograd history that shares the version counter (what detach() gives, without a
      // dispatch); its Python tensor is made at the first unpack.
      new (&h->tensor) at::Tensor(t.tensor_data());
      h->wrapped = nullptr;
    }
    Py_INCREF(self);
    h->owner = self;
    h->tracker = tracker;
    h->version = t._version();
    h->counted = false;
    h->step = 0;
    h->device = t.device().is_cpu() ? -1 : t.device().index();
    h->ptr = 0;
    if (t.has_storage()) {
      int64_t nbytes = 0;
      const Key key = storage_key_of(t, &nbytes);
      h->ptr = key.ptr;
      const int64_t data = reinterpret_cast<int64_t>(t.data_ptr());
      if (key.ptr != 0 && !tracker->is_param(data) && !tracker->is_param(key.ptr)) {
        tracker->add(h, nbytes);
      }
    }
    return reinterpret_cast<PyObject*>(h);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// unpack(holder) -> tensor, or autograd's in-place error.
PyObject* saved_unpack(PyObject* /*self*/, PyObject* arg) {
  if (Py_TYPE(arg) != &SavedHolderType) {
    PyErr_SetString(PyExc_TypeError, "unpack hook: not a memlens holder");
    return nullptr;
  }
  auto* h = reinterpret_cast<SavedHolder*>(arg);
  if (h->wrapped == nullptr) {
    h->wrapped = THPVariable_Wrap(h->tensor);
    if (h->wrapped == nullptr) {
      return nullptr;
    }
  }
  const at::Tensor& t = h->tensor;
  const int64_t now = t._version();
  if (now != h->version) {
    std::string shape = "[";
    for (int64_t i = 0; i < t.dim(); ++i) {
      shape += (i ? ", " : "") + std::to_string(t.size(i));
    }
    shape += "]";
    std::string type = t.toString();  // as Python's tensor.type() names it, where it can
    if (PyObject* name = PyObject_CallMethod(h->wrapped, "type", nullptr)) {
      if (const char* text = PyUnicode_AsUTF8(name)) {
        type = text;
      }
      Py_DECREF(name);
    }
    PyErr_Clear();
    const std::string msg =
        "one of the variables needed for gradient computation has been modified by an "
        "inplace operation: [" + type + " " + shape + "], is at version " +
        std::to_string(now) + "; expected version " + std::to_string(h->version) +
        " instead.";
    PyErr_SetString(PyExc_RuntimeError, msg.c_str());
    return nullptr;
  }
  Py_INCREF(h->wrapped);
  return h->wrapped;
}

PyMethodDef pack_def = {"pack", saved_pack, METH_O, "memlens saved-tensor pack hook"};
PyMethodDef unpack_def = {"unpack", saved_unpack, METH_O, "memlens saved-tensor unpack hook"};
