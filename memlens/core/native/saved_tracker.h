// Part of memlens_native.cpp, included inside its anonymous namespace (one translation
// unit, built as one module): the saved-tensor pack/unpack hooks and what they keep alive.
// Not a standalone header: it relies on the includes and the helpers before it.

// --- activations saved for backward: pack/unpack hooks without a Python frame --------------
//
// What core.recorder.saved.SavedTensorTracker does in Python, with the same figures:
// autograd calls the pack hook for every tensor it saves and unpack when backward needs it.
// pack keeps the tensor as autograd would (an input as it is; an op's own output as a
// detached alias that shares the version counter) and its version in a small holder
// (autograd stores the holder); unpack raises autograd's own in-place error if the version moved, since a pack
// hook turns autograd's check off (its text made by the Python function set_error_text
// gives, in the words of the torch that runs). Parameters (by data pointer) are checked but
// never counted. All of it runs with the GIL held.
//
// Counting: each storage once, whole, except a tensor without autograd history that reaches
// only part of its storage (a batch sliced from a data set): that counts the bytes it
// reaches (several such, their union); the rest is the data's. Such storages are few; their
// bytes are summed when asked for (refresh()).

class SavedTracker;

// A node's owning pointer, whichever smart pointer this torch holds nodes by
// (std::shared_ptr up to 2.11, c10::intrusive_ptr since), and its weak pointer to match
// (used here and by call_tracker.h).
using NodePtr = std::decay_t<decltype(std::declval<const at::Tensor&>().grad_fn())>;
template <class P>
struct WeakOf;
template <class T>
struct WeakOf<std::shared_ptr<T>> {
  using type = std::weak_ptr<T>;
};
template <class T, class N>
struct WeakOf<c10::intrusive_ptr<T, N>> {
  using type = c10::weak_intrusive_ptr<T, N>;
};
using WeakNodePtr = typename WeakOf<NodePtr>::type;

struct SavedHolder {
  PyObject_HEAD
  at::Tensor tensor;   // an input as it is, an output as its detached alias (placement-new)
  // An output of the node being built: that node, weakly, and the output's number (an
  // input's own grad_fn is what the in-place error names).
  WeakNodePtr output_fn;
  PyObject* wrapped;   // its Python tensor: an input's own, an output's made at first unpack
  PyObject* owner;     // the capsule that keeps `tracker` alive
  SavedTracker* tracker;
  int64_t version;
  int64_t device;
  int64_t ptr;
  int64_t lo, hi;      // the bytes of the storage it reaches; lo < 0: all of it
  int64_t step;        // the tracker's step when packed
  uint32_t output_nr;
  bool is_output;
  bool counted;
};

PyTypeObject SavedHolderType;

class SavedTracker {
 public:
  struct Entry {
    int64_t fresh = 0;     // holders packed in the current step
    int64_t retained = 0;  // holders that outlived the step that made them
    int64_t whole_fresh = 0, whole_retained = 0;  // of those, holders reaching all of it
    std::vector<SavedHolder*> parts;  // holders reaching part of it, of any step
    int64_t nbytes = 0;
    int64_t counted_step = -1;  // the step whose saved bytes already include it
  };

  // Data pointers of the parameters and their storages' base pointers: a tensor starting at
  // one, or in one's storage, is a parameter, never an activation.
  void set_param_ptrs(const std::vector<int64_t>& ptrs) {
    param_ptrs_.clear();
    param_ptrs_.insert(ptrs.begin(), ptrs.end());
  }

  // A sharded model (FSDP): a saved leaf that requires grad, or a view of one, is a
  // parameter too (the full ones FSDP gathers: new storages at every gather).
  void set_leaf_params(bool on) { leaf_params_ = on; }
  bool leaf_params() const { return leaf_params_; }

  void set_error_text(py::object fn) { error_text_ = std::move(fn); }
  const py::object& error_text() const { return error_text_; }

  void add(SavedHolder* h, int64_t nbytes) {
    const Key key{h->device, h->ptr};
    Entry& e = live_[key];
    const bool whole = h->lo < 0;
    if (e.fresh + e.retained == 0) {
      e.nbytes = nbytes;
    }
    if (whole && e.whole_fresh + e.whole_retained == 0) {
      whole_bytes_ += e.nbytes;
      partial_.erase(key);
    }
    e.fresh += 1;
    if (whole) {
      e.whole_fresh += 1;
    } else {
      e.parts.push_back(h);
      if (e.whole_fresh + e.whole_retained == 0) {
        partial_.insert(key);
      }
    }
    if (e.counted_step != step_) {
      e.counted_step = step_;
      step_saved_bytes_ += whole ? e.nbytes : h->hi - h->lo;
    }
    h->step = step_;
    h->counted = true;
  }

  void release(SavedHolder* h) {
    h->counted = false;
    const Key key{h->device, h->ptr};
    auto it = live_.find(key);
    if (it == live_.end()) {
      return;
    }
    Entry& e = it->second;
    const bool fresh = h->step == step_;
    (fresh ? e.fresh : e.retained) -= 1;
    if (h->lo < 0) {
      int64_t& whole = fresh ? e.whole_fresh : e.whole_retained;
      whole -= 1;
      if (!fresh && whole == 0) {
        retained_whole_bytes_ -= e.nbytes;
      }
      if (e.whole_fresh + e.whole_retained == 0) {
        whole_bytes_ -= e.nbytes;
        if (!e.parts.empty()) {
          partial_.insert(key);
        }
      }
    } else {
      auto part = std::find(e.parts.begin(), e.parts.end(), h);
      if (part != e.parts.end()) {
        e.parts.erase(part);
      }
    }
    if (e.fresh + e.retained == 0) {
      partial_.erase(key);
      counted_.erase(key);
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
      if (e.whole_fresh > 0 && e.whole_retained == 0) {
        retained_whole_bytes_ += e.nbytes;
      }
      e.whole_retained += e.whole_fresh;
      e.whole_fresh = 0;
      e.retained += e.fresh;
      e.fresh = 0;
    }
    step_ += 1;
  }

  // The bytes of the storages counted in part, from what refers to them now.
  void refresh() {
    counted_.clear();
    partial_bytes_ = 0;
    for (const Key& key : partial_) {
      Entry& e = live_.at(key);
      const int64_t n = reach(e.parts, e.nbytes, -1);
      partial_bytes_ += n;
      if (n < e.nbytes) {
        counted_[key] = n;
      }
    }
  }

  bool is_param(int64_t ptr) const { return param_ptrs_.count(ptr) != 0; }
  bool contains(int64_t device, int64_t ptr) const { return live_.count(Key{device, ptr}) != 0; }
  // Bytes counted of a storage saved tensors reach only part of (as of the last
  // live_bytes()), else -1.
  int64_t counted_part(int64_t device, int64_t ptr) const {
    auto it = counted_.find(Key{device, ptr});
    return it == counted_.end() ? -1 : it->second;
  }
  int64_t live_bytes() {
    refresh();
    return whole_bytes_ + partial_bytes_;
  }
  int64_t retained_bytes() const {
    int64_t total = retained_whole_bytes_;
    for (const auto& kv : live_) {
      const Entry& e = kv.second;
      if (e.whole_retained == 0 && e.retained > e.whole_retained && !e.parts.empty()) {
        total += reach(e.parts, e.nbytes, step_);
      }
    }
    return total;
  }
  int64_t step_saved_bytes() const { return step_saved_bytes_; }

  // The storages counted in part (as of the last live_bytes()): (device, ptr, bytes
  // counted, the storage's bytes).
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> partial_storages() const {
    std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> out;
    out.reserve(counted_.size());
    for (const auto& kv : counted_) {
      auto it = live_.find(kv.first);
      if (it != live_.end()) {
        out.emplace_back(kv.first.device, kv.first.ptr, kv.second, it->second.nbytes);
      }
    }
    return out;
  }

  // Keys of the storages counted whole (what precise mode files as activations).
  std::vector<std::pair<int64_t, int64_t>> keys() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    out.reserve(live_.size());
    for (const auto& kv : live_) {
      if (!counted_.count(kv.first)) {
        out.emplace_back(kv.first.device, kv.first.ptr);
      }
    }
    return out;
  }

 private:
  // Bytes of a storage that the holders `parts` each reach only part of (those packed
  // before step `before`, where it is not -1): the union of their spans.
  static int64_t reach(const std::vector<SavedHolder*>& parts, int64_t nbytes,
                       int64_t before) {
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const SavedHolder* h : parts) {
      if (before < 0 || h->step < before) {
        spans.emplace_back(h->lo, h->hi);
      }
    }
    std::sort(spans.begin(), spans.end());
    int64_t total = 0, end = -1;
    for (const auto& s : spans) {
      if (s.second <= end) {
        continue;
      }
      total += s.second - std::max(s.first, end);
      end = s.second;
    }
    return std::min(total, nbytes);
  }

  std::unordered_set<int64_t> param_ptrs_;
  bool leaf_params_ = false;
  std::unordered_map<Key, Entry, KeyHash> live_;
  std::unordered_set<Key, KeyHash> partial_;  // keys whose holders all reach part of it
  std::unordered_map<Key, int64_t, KeyHash> counted_;  // of those, the ones counted in part
  py::object error_text_;
  int64_t step_ = 0;
  int64_t whole_bytes_ = 0;
  int64_t partial_bytes_ = 0;
  int64_t retained_whole_bytes_ = 0;
  int64_t step_saved_bytes_ = 0;
};

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

void saved_holder_dealloc(PyObject* self) {
  auto* h = reinterpret_cast<SavedHolder*>(self);
  if (h->counted && h->tracker != nullptr) {
    h->tracker->release(h);
  }
  h->tensor.~Tensor();
  h->output_fn.~WeakNodePtr();
  Py_XDECREF(h->wrapped);
  Py_XDECREF(h->owner);
  Py_TYPE(self)->tp_free(self);
}

const char* kCapsule = "memlens_native.SavedTracker";

// The bytes of its storage `t` reaches, [lo, hi); lo = -1 where that is all of it.
void span_of(const at::Tensor& t, int64_t nbytes, int64_t* lo, int64_t* hi) {
  *lo = -1;
  *hi = nbytes;
  if (t.numel() == 0) {
    *lo = *hi = 0;
    return;
  }
  int64_t first = t.storage_offset(), last = first;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t step = (t.size(d) - 1) * t.stride(d);
    (step >= 0 ? last : first) += step;
  }
  const auto size = static_cast<int64_t>(t.element_size());
  if (first * size > 0 || (last + 1) * size < nbytes) {
    *lo = first * size;
    *hi = (last + 1) * size;
  }
}

// The address of a tensor's first element, as Tensor.data_ptr() gives it, or 0 where its
// storage holds no data (a wrapper subclass; a storage FSDP freed): never raises.
int64_t data_address(const at::Tensor& t) {
  if (!t.has_storage()) {
    return 0;
  }
  const auto* base = static_cast<const char*>(t.storage().data());
  return base == nullptr ? 0
                         : reinterpret_cast<int64_t>(base + t.storage_offset() * t.element_size());
}

// A leaf that requires grad, or a view of one (a weight's transpose): a parameter.
bool is_leaf_param(const at::Tensor& t) {
  const at::TensorBase& base = t.is_view() ? t._base() : t;
  return base.requires_grad() && base.is_leaf();
}

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
    const int64_t data = data_address(t);
    const bool param = (data != 0 && tracker->is_param(data)) ||
                       (tracker->leaf_params() && is_leaf_param(t));
    const bool plain = !t.requires_grad();  // no autograd history
    // An output of the node being built (the newest node on this thread): autograd names
    // that node in its in-place error; an input, its grad_fn at the time of the error.
    NodePtr fn = plain ? NodePtr() : t.grad_fn();
    h->is_output = fn && fn->sequence_nr() + 1 == at::sequence_number::peek();
    h->output_nr = h->is_output ? t.output_nr() : 0;
    // Kept as autograd itself keeps it: an input (a parameter, a tensor with or without
    // history) as it is, its Python tensor too, which unpack hands back; an op's own output
    // as an alias without autograd history that shares the version counter (what detach()
    // gives, without a dispatch), or the node would hold itself.
    if (h->is_output) {
      new (&h->tensor) at::Tensor(t.tensor_data());
      new (&h->output_fn) WeakNodePtr(fn);
      h->wrapped = nullptr;
    } else {
      new (&h->tensor) at::Tensor(t);
      new (&h->output_fn) WeakNodePtr(NodePtr());
      Py_INCREF(arg);
      h->wrapped = arg;
    }
    Py_INCREF(self);
    h->owner = self;
    h->tracker = tracker;
    h->version = t._version();
    h->counted = false;
    h->step = 0;
    h->device = t.device().is_cpu() ? -1 : t.device().index();
    h->ptr = 0;
    h->lo = -1;
    h->hi = 0;
    if (t.has_storage()) {
      int64_t nbytes = 0;
      const Key key = storage_key_of(t, &nbytes);
      h->ptr = key.ptr;
      if (key.ptr != 0 && !param && !tracker->is_param(key.ptr)) {
        if (plain) {  // only a tensor without history can be a slice of data
          span_of(local_tensor_of(t), nbytes, &h->lo, &h->hi);  // a DTensor: its shard's
        }
        tracker->add(h, nbytes);
      }
    }
    return reinterpret_cast<PyObject*>(h);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// (grad_fn name, output number) as autograd's own check names a saved tensor, or None.
PyObject* saved_named(const SavedHolder* h) {
  NodePtr fn;
  uint32_t nr = 0;
  if (h->is_output) {
    fn = h->output_fn.lock();
    nr = h->output_nr;
  } else {
    fn = h->tensor.grad_fn();  // the input as it is now: an in-place op may have given it one
  }
  if (!fn) {
    Py_RETURN_NONE;
  }
  return Py_BuildValue("(sI)", fn->name().c_str(), nr);
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
  const int64_t now = h->tensor._version();
  if (now != h->version) {
    const py::object& format = h->tracker->error_text();
    if (!format) {
      PyErr_SetString(PyExc_RuntimeError,
                      "one of the variables needed for gradient computation has been "
                      "modified by an inplace operation");
      return nullptr;
    }
    PyObject* named = saved_named(h);
    if (named == nullptr) {
      return nullptr;
    }
    PyObject* text = PyObject_CallFunction(format.ptr(), "OOLL", h->wrapped, named,
                                           static_cast<long long>(now),
                                           static_cast<long long>(h->version));
    Py_DECREF(named);
    if (text == nullptr) {
      return nullptr;
    }
    PyErr_SetObject(PyExc_RuntimeError, text);
    Py_DECREF(text);
    return nullptr;
  }
  Py_INCREF(h->wrapped);
  return h->wrapped;
}

PyMethodDef pack_def = {"pack", saved_pack, METH_O, "memlens saved-tensor pack hook"};
PyMethodDef unpack_def = {"unpack", saved_unpack, METH_O, "memlens saved-tensor unpack hook"};
