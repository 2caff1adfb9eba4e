// memlens' native helpers: the per-tensor work of a measured step, out of Python.
//
//   Recorder      precise mode: every allocation and free of the CPU allocator (below)
//   SavedTracker  the saved-tensor pack/unpack hooks and what they keep alive
//   GradWatch     each gradient's sum of squares as autograd writes it; the gradients'
//                 storages in one pass
//   count_graph_nodes  the autograd graph's size without a Python object per node
//
// Built by core/native/__init__.py against the installed torch; core/ has the same code in
// Python for where no compiler is found, and tests/core/test_native.py holds the two to the
// same figures.
//
// Recorder. c10 tells the memory profiler about each allocation and free through the
// MemoryReportingInfoBase that is current in the thread's ThreadLocalDebugInfo (this is how
// torch.profiler(profile_memory=True) sees memory). A Recorder pushed there gets the same
// calls without the profiler's per-op recording: a map insert or erase per event, plus the
// Python stack on the owning thread: the newest kStackFrames frames outside torch and
// memlens' own files, walked here and kept once per distinct stack (a training loop
// allocates from the same few lines step after step), so an event carries a stack id.
//
// Only the thread that started the Recorder (and threads autograd hands its state to) report
// to it. Everything that touches Python objects runs with the GIL held.

#include <Python.h>
#include <malloc.h>

#include <c10/core/Allocator.h>
#include <c10/util/Logging.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/autograd/python_variable.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The CPU allocator reports a free only of what it saw allocated while someone listened,
// and logs a warning about each other free it is asked to report ("Memory block of unknown
// size was allocated before the profiling started"): a storage made before the run and
// freed during it. That is expected here (such storages are followed from Python), so
// c10's log threshold is raised to errors while any recorder listens.
std::mutex log_mu;
int listening = 0;
int saved_log_level = 0;

void quiet_logs(bool on) {
  std::lock_guard<std::mutex> lock(log_mu);
  if (on) {
    if (listening++ == 0) {
      saved_log_level = FLAGS_caffe2_log_level;
      FLAGS_caffe2_log_level = std::max(saved_log_level, 2);  // 2: ERROR
    }
  } else if (listening > 0 && --listening == 0) {
    FLAGS_caffe2_log_level = saved_log_level;
  }
}

struct Key {
  int64_t device;
  int64_t ptr;
  bool operator==(const Key& o) const { return device == o.device && ptr == o.ptr; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<int64_t>()(k.ptr) ^ (static_cast<size_t>(k.device) << 56);
  }
};

// A tensor's storage as core.memory.storage_key gives it: (device index, -1 for CPU; base
// pointer), and its bytes in `nbytes`.
Key storage_key_of(const at::Tensor& t, int64_t* nbytes) {
  const auto& st = t.storage();
  *nbytes = static_cast<int64_t>(st.nbytes());
  return Key{t.device().is_cpu() ? -1 : t.device().index(), reinterpret_cast<int64_t>(st.data())};
}

struct Record {
  Key key;
  int64_t nbytes;
  int category;
  int pending_events;  // events that name it and are not drained yet
  bool live;
};

struct Event {
  int64_t t_us;
  int action;  // 0 alloc, 1 free
  int64_t id;
  int64_t step;
  int phase;
  int64_t stack;  // index into the recorder's stacks, -1 for none
};

constexpr int kStackFrames = 6;

struct Frame {
  PyObject* code;  // a reference the recorder holds
  int lasti;
  bool operator==(const Frame& o) const { return code == o.code && lasti == o.lasti; }
};

struct StackHash {
  size_t operator()(const std::vector<Frame>& v) const {
    size_t h = v.size();
    for (const auto& f : v) {
      h = h * 1000003u ^ (reinterpret_cast<size_t>(f.code) >> 4) ^ (static_cast<size_t>(f.lasti) << 40);
    }
    return h;
  }
};

class Recorder : public c10::MemoryReportingInfoBase {
 public:
  // internal: substrings (or, ending in '*', prefixes) of the file names whose frames are
  // left out of stacks. with_frames false: no stacks at all.
  Recorder(int64_t t0_us, bool with_frames, std::vector<std::string> internal)
      : t0_us_(t0_us), with_frames_(with_frames), internal_(std::move(internal)) {}

  ~Recorder() override {
    // The code objects stacks refer to are released by clear() (the Python wrapper calls
    // it, GIL held, when it goes); any left are leaked rather than released from a thread
    // that may not hold the GIL.
  }

  bool memoryProfilingEnabled() const override { return enabled_; }

  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t /*total_allocated*/,
                         size_t /*total_reserved*/, c10::Device device) override {
    if (!enabled_ || alloc_size == 0 || ptr == nullptr) {
      return;
    }
    const int64_t t = now_us() - t0_us_;
    const Key key{device.index(), reinterpret_cast<int64_t>(ptr)};
    int64_t stack = -1;
    if (alloc_size > 0 && with_frames_ && std::this_thread::get_id() == owner_ &&
        Py_IsInitialized()) {
      PyGILState_STATE g = PyGILState_Ensure();
      stack = capture_stack();
      PyGILState_Release(g);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (alloc_size > 0) {
      alloc_locked(key, alloc_size, t, category_guess_, stack);
    } else {
      free_locked(key, t);
    }
  }

  // --- called from Python (GIL held) -----------------------------------------------------
  // Listens on this thread from now on (again, after a stop() from another thread).
  void start() {
    if (active_) {
      if (std::this_thread::get_id() == owner_ && !enabled_.exchange(true)) {
        quiet_logs(true);
      }
      return;
    }
    owner_ = std::this_thread::get_id();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, self_.lock());
    active_ = true;
    enabled_ = true;
    quiet_logs(true);
  }

  // Takes the recorder off the thread that started it. Returns false where something else
  // was pushed on top and never popped (then it only stops reporting).
  bool stop() {
    if (enabled_.exchange(false)) {
      quiet_logs(false);
    }
    if (!active_ || std::this_thread::get_id() != owner_) {
      return !active_;
    }
    auto top = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
    if (top != this) {
      return false;
    }
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    active_ = false;
    return true;
  }

  // A storage that existed before the recorder started (parameters, carried state).
  int64_t track(int64_t device, int64_t ptr, int64_t nbytes, int category, bool at_start) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{device, ptr};
    auto it = live_.find(key);
    if (it != live_.end()) {
      return it->second;
    }
    return alloc_locked(key, nbytes, at_start ? 0 : now_us() - t0_us_, category, -1);
  }

  void freed(int64_t device, int64_t ptr, int64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(Key{device, ptr});
    if (it != live_.end() && it->second == id) {
      free_locked(Key{device, ptr}, now_us() - t0_us_);
    }
  }

  void begin_phase(int64_t step, int phase, int category) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    phase_ = phase;
    category_guess_ = category;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_bytes_ = live_bytes_;
  }

  int64_t live_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_bytes_;
  }

  int64_t peak_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_bytes_;
  }

  size_t pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
  }

  // Sets the category of the live storages among `keys` (device, ptr).
  void classify(const std::vector<std::pair<int64_t, int64_t>>& keys, int category) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : keys) {
      auto it = live_.find(Key{k.first, k.second});
      if (it != live_.end()) {
        records_[it->second].category = category;
      }
    }
  }

  // Pending events as a float64 array of rows (t_us, action, id, ptr, nbytes, category,
  // step, phase, stack id or -1), the category as of now for storages still live, as of
  // their free otherwise; and the text of each stack first seen since the last drain, as
  // (id, "file:line:function|...", newest first).
  std::pair<py::array_t<double>, py::list> drain() {
    std::vector<Event> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(events_);
    }
    const auto n = static_cast<py::ssize_t>(events.size());
    py::array_t<double> rows({n, static_cast<py::ssize_t>(9)});
    auto out = rows.mutable_unchecked<2>();
    {
      std::lock_guard<std::mutex> lock(mu_);
      py::ssize_t i = 0;
      for (const auto& e : events) {
        auto it = records_.find(e.id);
        Record& r = it->second;
        out(i, 0) = static_cast<double>(e.t_us);
        out(i, 1) = e.action;
        out(i, 2) = static_cast<double>(e.id);
        out(i, 3) = static_cast<double>(r.key.ptr);
        out(i, 4) = static_cast<double>(r.nbytes);
        out(i, 5) = r.category;
        out(i, 6) = static_cast<double>(e.step);
        out(i, 7) = e.phase;
        out(i, 8) = static_cast<double>(e.stack);
        ++i;
        if (--r.pending_events == 0 && !r.live) {
          records_.erase(it);
        }
      }
    }
    py::list texts;
    for (; texts_done_ < stacks_.size(); ++texts_done_) {
      texts.append(py::make_tuple(texts_done_, stack_text(stacks_[texts_done_])));
    }
    return {rows, texts};
  }

  // Drops every event and record, and the stacks' references (GIL held).
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
    live_.clear();
    records_.clear();
    live_bytes_ = peak_bytes_ = 0;
    for (auto& kv : internal_code_) {
      Py_DECREF(kv.first);
    }
    internal_code_.clear();
    stack_ids_.clear();
    stacks_.clear();
    texts_done_ = 0;
  }

  std::weak_ptr<Recorder> self_;

 private:
  int64_t alloc_locked(const Key& key, int64_t nbytes, int64_t t, int category,
                       int64_t stack) {
    auto it = live_.find(key);
    if (it != live_.end()) {
      // Its free happened where this recorder could not see it: it is gone now.
      free_locked(key, t);
    }
    const int64_t id = next_id_++;
    records_[id] = Record{key, nbytes, category, 1, true};
    live_[key] = id;
    live_bytes_ += nbytes;
    if (live_bytes_ > peak_bytes_) {
      peak_bytes_ = live_bytes_;
    }
    events_.push_back(Event{t, 0, id, step_, phase_, stack});
    return id;
  }

  void free_locked(const Key& key, int64_t t) {
    auto it = live_.find(key);
    if (it == live_.end()) {
      return;  // never seen: allocated before the recorder started and not tracked
    }
    const int64_t id = it->second;
    live_.erase(it);
    Record& r = records_[id];
    r.live = false;
    r.pending_events += 1;
    live_bytes_ -= r.nbytes;
    events_.push_back(Event{t, 1, id, step_, phase_, -1});
  }

  // GIL held. Whether a code object's file is one whose frames stay out of stacks.
  bool internal(PyObject* code) {
    auto it = internal_code_.find(code);
    if (it != internal_code_.end()) {
      return it->second;
    }
    bool inside = false;
    PyObject* name = PyObject_GetAttrString(code, "co_filename");
    const char* text = name != nullptr ? PyUnicode_AsUTF8(name) : nullptr;
    if (text != nullptr) {
      const std::string file(text);
      for (const auto& pat : internal_) {
        if (!pat.empty() && pat.back() == '*') {
          inside = file.compare(0, pat.size() - 1, pat, 0, pat.size() - 1) == 0;
        } else {
          inside = file.find(pat) != std::string::npos;
        }
        if (inside) {
          break;
        }
      }
    }
    Py_XDECREF(name);
    PyErr_Clear();
    Py_INCREF(code);  // the pointer stays a key: keep the object
    internal_code_.emplace(code, inside);
    return inside;
  }

  // GIL held, owner thread. The id of the current Python stack.
  int64_t capture_stack() {
    std::vector<Frame> frames;
    frames.reserve(kStackFrames);
    PyFrameObject* f = PyThreadState_GetFrame(PyThreadState_Get());
    while (f != nullptr && static_cast<int>(frames.size()) < kStackFrames) {
      PyCodeObject* code = PyFrame_GetCode(f);
      if (!internal(reinterpret_cast<PyObject*>(code))) {
        frames.push_back(Frame{reinterpret_cast<PyObject*>(code), PyFrame_GetLasti(f)});
      }
      Py_DECREF(code);
      PyFrameObject* back = PyFrame_GetBack(f);
      Py_DECREF(f);
      f = back;
    }
    Py_XDECREF(f);
    auto it = stack_ids_.find(frames);
    if (it != stack_ids_.end()) {
      return it->second;
    }
    const auto id = static_cast<int64_t>(stacks_.size());
    stack_ids_.emplace(frames, id);  // code objects already held by internal_code_
    stacks_.push_back(std::move(frames));
    return id;
  }

  // GIL held. "file:line:function|..." for a stack, newest frame first.
  static std::string stack_text(const std::vector<Frame>& frames) {
    std::string out;
    for (const auto& f : frames) {
      auto* code = reinterpret_cast<PyCodeObject*>(f.code);
      PyObject* file = PyObject_GetAttrString(f.code, "co_filename");
      PyObject* name = PyObject_GetAttrString(f.code, "co_name");
      const char* file_s = file ? PyUnicode_AsUTF8(file) : nullptr;
      const char* name_s = name ? PyUnicode_AsUTF8(name) : nullptr;
      if (!out.empty()) {
        out += '|';
      }
      out += file_s ? file_s : "?";
      out += ':';
      out += std::to_string(f.lasti >= 0 ? PyCode_Addr2Line(code, f.lasti) : -1);
      out += ':';
      out += name_s ? name_s : "?";
      Py_XDECREF(file);
      Py_XDECREF(name);
      PyErr_Clear();
    }
    return out;
  }

  const int64_t t0_us_;
  const bool with_frames_;
  const std::vector<std::string> internal_;
  std::unordered_map<PyObject*, bool> internal_code_;  // GIL held
  std::unordered_map<std::vector<Frame>, int64_t, StackHash> stack_ids_;  // GIL held
  std::vector<std::vector<Frame>> stacks_;  // GIL held
  size_t texts_done_ = 0;
  std::thread::id owner_;
  bool active_ = false;
  std::atomic<bool> enabled_{false};
  std::mutex mu_;
  std::unordered_map<Key, int64_t, KeyHash> live_;
  std::unordered_map<int64_t, Record> records_;
  std::vector<Event> events_;
  int64_t live_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  int64_t next_id_ = 0;
  int64_t step_ = 0;
  int phase_ = 0;
  int category_guess_ = 0;
};

std::shared_ptr<Recorder> make_recorder(int64_t t0_us, bool with_frames,
                                        std::vector<std::string> internal) {
  auto r = std::make_shared<Recorder>(t0_us, with_frames, std::move(internal));
  r->self_ = r;
  return r;
}


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


// --- the gradient norm, taken while each gradient is still in cache -------------------------
//
// The loop reports the 2-norm of all gradients after backward. Read back afterwards, the
// gradients come from memory (the kernels in between evicted them); a post-accumulate-grad
// hook on each parameter squares and sums its gradient right after autograd wrote it. At
// read time a parameter's value is used only if its gradient is still the same tensor at the
// same version; otherwise (a user's own hook replaced ours, an in-place change, a dtype or
// device the hook does not handle) it is computed then.

// Sum of squares of n floats, in float lanes flushed to double every block. Compiled twice:
// for the baseline x86-64 (SSE2, 4 lanes) and for AVX2 with FMA (8 lanes, fused), chosen
// once at run time. Where the gradient was just written it is in cache, and the SSE2 loop
// was the bound: mlp's 662k gradients took 0.17 ms a step.
template <int Lanes>
inline double sum_squares_floats(const float* p, int64_t n) {
  double total = 0.0;
  int64_t i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + 4096);
    float acc[Lanes] = {0};
    for (; i + Lanes <= end; i += Lanes) {
      for (int k = 0; k < Lanes; ++k) {
        acc[k] += p[i + k] * p[i + k];
      }
    }
    for (; i < end; ++i) {
      acc[0] += p[i] * p[i];
    }
    for (float a : acc) {
      total += a;
    }
  }
  return total;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) double sum_squares_floats_avx2(const float* p, int64_t n) {
  return sum_squares_floats<32>(p, n);
}
const bool kHaveAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif

double sum_squares_float_array(const float* p, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (kHaveAvx2) {
    return sum_squares_floats_avx2(p, n);
  }
#endif
  return sum_squares_floats<16>(p, n);
}

// Sum of squares of a contiguous CPU float32/float64 tensor; false for anything else.
bool sum_of_squares(const at::Tensor& g, double* out) {
  if (!g.defined() || !g.device().is_cpu() || g.layout() != c10::kStrided || !g.is_contiguous()) {
    return false;
  }
  const int64_t n = g.numel();
  double total = 0.0;
  if (g.scalar_type() == at::kFloat) {
    total = sum_squares_float_array(g.const_data_ptr<float>(), n);
  } else if (g.scalar_type() == at::kDouble) {
    const double* p = g.const_data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) {
      total += p[i] * p[i];
    }
  } else {
    return false;
  }
  *out = total;
  return true;
}

struct GradSlot {
  const c10::TensorImpl* impl = nullptr;
  const void* data = nullptr;
  int64_t version = -1;
  double sumsq = 0.0;
};

struct GradSlots {
  std::vector<GradSlot> slots;
};

class SumSquaresHook : public torch::autograd::PostAccumulateGradHook {
 public:
  SumSquaresHook(std::shared_ptr<GradSlots> slots, size_t index)
      : slots_(std::move(slots)), index_(index) {}

  void operator()(const torch::autograd::Variable& param) override {
    const at::Tensor& g = param.grad();
    GradSlot& slot = slots_->slots[index_];
    double v = 0.0;
    if (sum_of_squares(g, &v)) {
      slot = GradSlot{g.unsafeGetTensorImpl(), g.const_data_ptr(), g._version(), v};
    } else {
      slot = GradSlot{};
    }
  }

 private:
  std::shared_ptr<GradSlots> slots_;
  size_t index_;
};

class GradWatch {
 public:
  explicit GradWatch(const py::list& params) : slots_(std::make_shared<GradSlots>()) {
    for (const auto& p : params) {
      if (!THPVariable_Check(p.ptr())) {
        throw py::type_error("GradWatch takes parameters");
      }
      params_.push_back(THPVariable_Unpack(p.ptr()));
    }
    slots_->slots.resize(params_.size());
    hooks_.resize(params_.size(), nullptr);
  }

  ~GradWatch() { uninstall(); }

  // Puts the hook on every parameter that has no post-accumulate-grad hook of its own.
  void install() {
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& current = torch::autograd::impl::post_acc_grad_hooks(params_[i]);
      if (current == nullptr && params_[i].requires_grad()) {
        auto hook = std::make_unique<SumSquaresHook>(slots_, i);
        hooks_[i] = hook.get();
        torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::move(hook));
      }
    }
  }

  // Takes off the hooks that are still ours.
  void uninstall() {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (hooks_[i] == nullptr) {
        continue;
      }
      auto& current = torch::autograd::impl::post_acc_grad_hooks(params_[i]);
      if (current.get() == hooks_[i]) {
        current.reset();
      }
      hooks_[i] = nullptr;
    }
  }

  // Storages a sample counts as parameters: never counted as gradients.
  void set_param_keys(const std::vector<std::pair<int64_t, int64_t>>& keys) {
    param_keys_.clear();
    for (const auto& k : keys) {
      param_keys_.insert(Key{k.first, k.second});
    }
  }

  // The gradients' storages now, each once and none of a parameter's, into `out` (cleared
  // first); returns their bytes.
  int64_t scan_grads(std::unordered_set<Key, KeyHash>* out) const {
    out->clear();
    int64_t total = 0;
    for (const auto& p : params_) {
      const at::Tensor& g = p.grad();
      if (!g.defined() || !g.has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(g, &n);
      if (key.ptr == 0 || param_keys_.count(key) != 0 || !out->insert(key).second) {
        continue;
      }
      total += n;
    }
    return total;
  }

  // scan_grads for Python: (bytes, [(device, base pointer)]), as core.memory's storage_key
  // gives them.
  py::tuple grad_storages() const {
    std::unordered_set<Key, KeyHash> seen;
    const int64_t total = scan_grads(&seen);
    py::list keys;
    for (const auto& key : seen) {
      keys.append(py::make_tuple(key.device, key.ptr));
    }
    return py::make_tuple(total, keys);
  }

  const std::unordered_set<Key, KeyHash>& param_keys() const { return param_keys_; }

  // Sum of squares of every gradient now, or -1 where one is of a kind handled in Python.
  double sum_of_squares_now() {
    double total = 0.0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& g = params_[i].grad();
      if (!g.defined()) {
        continue;
      }
      const GradSlot& slot = slots_->slots[i];
      if (slot.impl == g.unsafeGetTensorImpl() && slot.data == g.const_data_ptr() &&
          slot.version == g._version()) {
        total += slot.sumsq;
        continue;
      }
      double v = 0.0;
      if (!sum_of_squares(g, &v)) {
        return -1.0;
      }
      total += v;
    }
    return total;
  }

 private:
  std::vector<at::Tensor> params_;
  std::shared_ptr<GradSlots> slots_;
  std::vector<SumSquaresHook*> hooks_;  // ours, where installed (owned by the parameter)
  std::unordered_set<Key, KeyHash> param_keys_;
};

// --- a light-mode sample: core.memory.MemoryProbe.sample's CPU figures in one call ----------
//
// Between two phases, a light-mode CPU sample adds up the gradients' storages (after
// zero_grad and backward), the optimizer state's (after the optimizer) and the carried
// tensors' (every phase), each storage once and in one category only: what MemoryProbe does
// with Python sets of keys, here with C++ sets and no Python object per tensor. Run right
// after a phase's kernels have pushed the interpreter out of the caches, the Python version
// cost 5 times its warm time, 0.3 ms a step on gan. The same rules, the same figures
// (tests/core/test_native.py holds the two to it).

// Bytes in use by malloc (glibc's mallinfo2, as core.memory.process_heap_bytes reads it), or
// -1 where there is none.
int64_t heap_bytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
#else
  return -1;
#endif
}

class LightProbe {
 public:
  LightProbe(py::object watch, py::object saved)
      : watch_obj_(std::move(watch)), saved_obj_(std::move(saved)) {
    watch_ = watch_obj_.cast<GradWatch*>();
    saved_ = saved_obj_.cast<std::shared_ptr<SavedTracker>>();
  }

  // (grads, optimizer, activations, other, heap) bytes now. `scan_grads`: the gradients may
  // have changed (else last scan's); `states`: the optimizers' `state` dicts where the
  // optimizer state may have changed, else None; `heap`: read the process heap (else, and
  // where there is no mallinfo2, -1).
  std::array<int64_t, 5> sample(bool scan_grads, const py::object& states,
                                const py::list& carried, bool heap) {
    if (scan_grads) {
      grads_total_ = watch_->scan_grads(&grads_);
    }
    if (!states.is_none()) {
      scan_optimizer(states.cast<py::list>());
    }
    const auto& params = watch_->param_keys();
    auto& seen = seen_;  // a member: cleared, its buckets kept from one sample to the next
    seen.clear();
    int64_t other = 0;
    for (const auto& item : carried) {
      if (!THPVariable_Check(item.ptr())) {
        continue;
      }
      const at::Tensor& t = THPVariable_Unpack(item.ptr());
      if (!t.defined() || !t.has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(t, &n);
      if (params.count(key) || grads_.count(key) || opt_.count(key) ||
          saved_->contains(key.device, key.ptr) || !seen.insert(key).second) {
        continue;
      }
      other += n;
    }
    return {grads_total_, opt_total_, saved_->live_bytes(), other,
            heap ? heap_bytes() : int64_t{-1}};
  }

  // --- phase edges: a sample recorded where it is taken, handed to Python at step end ----
  //
  // A phase edge's sample as a MemorySample (a dataclass made in Python, handed to the sink,
  // its flags looked up in Python sets) cost 30-60 us right after the phase's kernels (gan,
  // after backward), where this call costs a few. The edge keeps its figures in a row; the
  // loop takes the rows once a step (or at an error or a stop) and makes them samples there.

  // Which phases (core.records.PHASE_CODE) rescan gradients, optimizer state and the process
  // heap: MemoryProbe's rules. `preset`: its `optimizers`' `state` dicts are read where the
  // optimizer state may have changed. `t0`: the run's start on clock().
  void set_rules(const std::vector<int>& grads, const std::vector<int>& opt,
                 const std::vector<int>& heap, py::object preset, double t0) {
    rules_.fill(0);
    for (int c : grads) {
      rule(c) |= kScanGrads;
    }
    for (int c : opt) {
      rule(c) |= kScanOptimizer;
    }
    for (int c : heap) {
      rule(c) |= kReadHeap;
    }
    preset_ = std::move(preset);
    t0_ = t0;
  }

  // Seconds on the steady clock that now_us() reads too (the loop calibrates t0 against
  // time.perf_counter, so the two clocks' origins need not agree).
  static double clock() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void edge(int code, const py::list& carried) {
    const double t = clock() - t0_;
    const int r = rule(code);
    py::object states = py::none();
    if ((r & kScanOptimizer) && preset_) {
      py::list list;
      for (py::handle o : preset_.attr("optimizers")) {
        list.append(o.attr("state"));
      }
      states = std::move(list);
    }
    const auto v = sample((r & kScanGrads) != 0, states, carried, (r & kReadHeap) != 0);
    rows_.push_back(EdgeRow{code, t, v});
  }

  // The rows since the last take, as (code, time_s, grads, optimizer, activations, other,
  // heap) tuples; the buffer is emptied.
  PyObject* take() {
    PyObject* out = PyList_New(static_cast<Py_ssize_t>(rows_.size()));
    if (out == nullptr) {
      return nullptr;
    }
    for (size_t i = 0; i < rows_.size(); ++i) {
      const EdgeRow& row = rows_[i];
      PyObject* item = Py_BuildValue(
          "(idLLLLL)", row.code, row.t, static_cast<long long>(row.v[0]),
          static_cast<long long>(row.v[1]), static_cast<long long>(row.v[2]),
          static_cast<long long>(row.v[3]), static_cast<long long>(row.v[4]));
      if (item == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
      PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), item);
    }
    rows_.clear();
    return out;
  }

 private:
  static constexpr int kScanGrads = 1, kScanOptimizer = 2, kReadHeap = 4;
  struct EdgeRow {
    int code;
    double t;
    std::array<int64_t, 5> v;
  };

  int& rule(int code) {
    if (code < 0 || code >= static_cast<int>(rules_.size())) {
      throw py::value_error("phase code out of range: " + std::to_string(code));
    }
    return rules_[static_cast<size_t>(code)];
  }

  std::array<int, 8> rules_{};
  py::object preset_;
  double t0_ = 0.0;
  std::vector<EdgeRow> rows_;

  // Optimizers update their state in place: the same tensor objects, so the last scan stands
  // while the state holds the same ones (the rule core.memory's probe keeps by id()) and none
  // of it is a gradient's storage now.
  void scan_optimizer(const py::list& states) {
    // The check reads only the state dicts and the Python tensor objects (the TensorImpl
    // pointer lives in the object): right after the optimizer's kernels, reading every
    // state tensor's storage too cost more than the rest of the sample.
    ids_now_.clear();
    for_each_state_tensor(states, [this](PyObject* value) {
      ids_now_.emplace_back(value, THPVariable_Unpack(value).unsafeGetTensorImpl());
    });
    if (opt_reusable_ && ids_now_ == opt_ids_ && disjoint(opt_, grads_)) {
      return;
    }
    std::vector<at::Tensor> tensors;
    tensors.reserve(ids_now_.size());
    for_each_state_tensor(states, [&tensors](PyObject* value) {
      tensors.push_back(THPVariable_Unpack(value));
    });
    const auto& params = watch_->param_keys();
    collect_optimizer(tensors, params, nullptr);
    opt_reusable_ = true;
    if (!disjoint(opt_, grads_)) {
      collect_optimizer(tensors, params, &grads_);
      opt_reusable_ = false;  // never reuse a scan that had to leave gradients out
    }
    std::swap(opt_ids_, ids_now_);
  }

  // Calls f(tensor object) for each tensor in the optimizers' state dicts, in order.
  template <typename F>
  static void for_each_state_tensor(const py::list& states, F&& f) {
    for (const auto& state : states) {
      if (!PyDict_Check(state.ptr())) {
        continue;
      }
      PyObject *param, *per_param;
      Py_ssize_t i = 0;
      while (PyDict_Next(state.ptr(), &i, &param, &per_param)) {
        if (!PyDict_Check(per_param)) {
          continue;
        }
        PyObject *name, *value;
        Py_ssize_t j = 0;
        while (PyDict_Next(per_param, &j, &name, &value)) {
          if (THPVariable_Check(value)) {
            f(value);
          }
        }
      }
    }
  }

  void collect_optimizer(const std::vector<at::Tensor>& tensors,
                         const std::unordered_set<Key, KeyHash>& params,
                         const std::unordered_set<Key, KeyHash>* grads) {
    opt_.clear();
    opt_total_ = 0;
    for (const auto& t : tensors) {
      if (!t.defined() || !t.has_storage()) {
        continue;
      }
      int64_t n = 0;
      const Key key = storage_key_of(t, &n);
      if (params.count(key) || (grads != nullptr && grads->count(key)) ||
          !opt_.insert(key).second) {
        continue;
      }
      opt_total_ += n;
    }
  }

  static bool disjoint(const std::unordered_set<Key, KeyHash>& a,
                       const std::unordered_set<Key, KeyHash>& b) {
    const auto& small = a.size() <= b.size() ? a : b;
    const auto& large = a.size() <= b.size() ? b : a;
    for (const auto& k : small) {
      if (large.count(k)) {
        return false;
      }
    }
    return true;
  }

  py::object watch_obj_, saved_obj_;  // keep both alive
  GradWatch* watch_;
  std::shared_ptr<SavedTracker> saved_;
  std::unordered_set<Key, KeyHash> grads_, opt_;
  int64_t grads_total_ = 0, opt_total_ = 0;
  std::unordered_set<Key, KeyHash> seen_;  // carried storages of this sample
  // (tensor object, TensorImpl) of each state tensor at the last scan, and a buffer for now's
  std::vector<std::pair<const void*, const void*>> opt_ids_, ids_now_;
  bool opt_reusable_ = false;
};

// A set of pointers in one flat table (open addressing, linear probing): no allocation per
// element, as std::unordered_set makes, for the graph walk below.
class PointerSet {
 public:
  explicit PointerSet(size_t expected) {
    size_t cap = 64;
    while (cap < expected * 2) {
      cap *= 2;
    }
    slots_.assign(cap, nullptr);
  }

  // True if p was not there yet.
  bool insert(const void* p) {
    if ((size_ + 1) * 2 > slots_.size()) {
      grow();
    }
    return place(slots_, p);
  }

  size_t size() const { return size_; }

 private:
  bool place(std::vector<const void*>& slots, const void* p) {
    const size_t mask = slots.size() - 1;
    size_t i = (reinterpret_cast<uintptr_t>(p) >> 4) * 0x9E3779B97F4A7C15ull >> 20 & mask;
    while (slots[i] != nullptr) {
      if (slots[i] == p) {
        return false;
      }
      i = (i + 1) & mask;
    }
    slots[i] = p;
    if (&slots == &slots_) {
      ++size_;
    }
    return true;
  }

  void grow() {
    std::vector<const void*> bigger(slots_.size() * 2, nullptr);
    for (const void* p : slots_) {
      if (p != nullptr) {
        place(bigger, p);
      }
    }
    slots_.swap(bigger);
  }

  std::vector<const void*> slots_;
  size_t size_ = 0;
};

// --- the calls of every phase edge, without pybind11's dispatch ---------------------------
//
// pybind11 finds a call's overload and converts its arguments through its type registry.
// Warm that is about a microsecond; right after a phase's kernels, when none of the registry
// is in cache, a pybind11 call that did nothing took 21 us and a plain C function 5 us (gan,
// between backward and the next step). The loop's per-phase calls are plain C functions
// (METH_FASTCALL / METH_NOARGS), each bound to its object by a capsule that keeps the Python
// object alive: `fast_*()` on the pybind11 classes hands them out.

struct Bound {
  PyObject* owner;  // the pybind11 object (a strong reference)
  void* ptr;        // its C++ object
};

const char* kBound = "memlens_native.Bound";

PyObject* bind_fast(const py::object& owner, void* ptr, PyMethodDef* def) {
  auto* b = new Bound{owner.inc_ref().ptr(), ptr};
  PyObject* capsule = PyCapsule_New(b, kBound, [](PyObject* c) {
    auto* bound = static_cast<Bound*>(PyCapsule_GetPointer(c, kBound));
    Py_XDECREF(bound->owner);
    delete bound;
  });
  if (capsule == nullptr) {
    Py_DECREF(b->owner);
    delete b;
    throw py::error_already_set();
  }
  PyObject* f = PyCFunction_New(def, capsule);
  Py_DECREF(capsule);
  if (f == nullptr) {
    throw py::error_already_set();
  }
  return f;
}

// The object's C functions `defs`, each bound to it (bind_fast), as a tuple: what the
// `fast_*()` methods hand out.
template <typename T>
py::tuple bound_functions(const py::object& owner, std::initializer_list<PyMethodDef*> defs) {
  auto* ptr = owner.cast<T*>();
  py::tuple out(defs.size());
  size_t i = 0;
  for (PyMethodDef* def : defs) {
    out[i++] = py::reinterpret_steal<py::object>(bind_fast(owner, ptr, def));
  }
  return out;
}

template <typename T>
T* bound_object(PyObject* capsule) {
  return static_cast<T*>(static_cast<Bound*>(PyCapsule_GetPointer(capsule, kBound))->ptr);
}

// Runs `body` (returning a new reference); C++ and pybind11 errors become Python errors.
template <typename F>
PyObject* guarded(F&& body) {
  try {
    return body();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// LightProbe.sample(scan_grads, states, carried, heap) as a C function.
PyObject* light_sample_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return guarded([&]() -> PyObject* {
    if (nargs != 4 || !PyList_Check(args[2])) {
      PyErr_SetString(PyExc_TypeError, "sample(scan_grads, states, carried: list, heap)");
      return nullptr;
    }
    const int scan = PyObject_IsTrue(args[0]);
    const int heap = PyObject_IsTrue(args[3]);
    if (scan < 0 || heap < 0) {
      return nullptr;
    }
    const auto v = bound_object<LightProbe>(self)->sample(
        scan != 0, py::reinterpret_borrow<py::object>(args[1]),
        py::reinterpret_borrow<py::list>(args[2]), heap != 0);
    return Py_BuildValue("(LLLLL)", static_cast<long long>(v[0]), static_cast<long long>(v[1]),
                         static_cast<long long>(v[2]), static_cast<long long>(v[3]),
                         static_cast<long long>(v[4]));
  });
}

// LightProbe.edge(code, carried: list) as a C function.
PyObject* light_edge_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return guarded([&]() -> PyObject* {
    if (nargs != 2 || !PyLong_Check(args[0]) || !PyList_Check(args[1])) {
      PyErr_SetString(PyExc_TypeError, "edge(code: int, carried: list)");
      return nullptr;
    }
    const long code = PyLong_AsLong(args[0]);
    if (code == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    bound_object<LightProbe>(self)->edge(static_cast<int>(code),
                                          py::reinterpret_borrow<py::list>(args[1]));
    Py_RETURN_NONE;
  });
}

PyObject* light_take_fast(PyObject* self, PyObject* /*unused*/) {
  return guarded([&]() -> PyObject* { return bound_object<LightProbe>(self)->take(); });
}

PyObject* watch_install_fast(PyObject* self, PyObject* /*unused*/) {
  return guarded([&]() -> PyObject* {
    bound_object<GradWatch>(self)->install();
    Py_RETURN_NONE;
  });
}

PyObject* watch_sum_of_squares_fast(PyObject* self, PyObject* /*unused*/) {
  return guarded([&]() -> PyObject* {
    return PyFloat_FromDouble(bound_object<GradWatch>(self)->sum_of_squares_now());
  });
}

PyObject* saved_new_step_fast(PyObject* self, PyObject* /*unused*/) {
  bound_object<SavedTracker>(self)->new_step();
  Py_RETURN_NONE;
}

PyObject* saved_end_step_fast(PyObject* self, PyObject* /*unused*/) {
  bound_object<SavedTracker>(self)->end_step();
  Py_RETURN_NONE;
}

// (bytes first saved by this step, bytes of holders kept from earlier steps)
PyObject* saved_counts_fast(PyObject* self, PyObject* /*unused*/) {
  const auto* t = bound_object<SavedTracker>(self);
  return Py_BuildValue("(LL)", static_cast<long long>(t->step_saved_bytes()),
                       static_cast<long long>(t->retained_bytes()));
}

PyMethodDef light_sample_def = {"sample", reinterpret_cast<PyCFunction>(light_sample_fast),
                                METH_FASTCALL, "LightProbe.sample without pybind11"};
PyMethodDef light_edge_def = {"edge", reinterpret_cast<PyCFunction>(light_edge_fast),
                              METH_FASTCALL, "LightProbe.edge without pybind11"};
PyMethodDef light_take_def = {"take", light_take_fast, METH_NOARGS,
                              "LightProbe.take without pybind11"};
PyMethodDef watch_install_def = {"install", watch_install_fast, METH_NOARGS,
                                 "GradWatch.install without pybind11"};
PyMethodDef watch_sum_def = {"sum_of_squares", watch_sum_of_squares_fast, METH_NOARGS,
                             "GradWatch.sum_of_squares without pybind11"};
PyMethodDef saved_new_step_def = {"new_step", saved_new_step_fast, METH_NOARGS,
                                  "SavedTracker.new_step without pybind11"};
PyMethodDef saved_end_step_def = {"end_step", saved_end_step_fast, METH_NOARGS,
                                  "SavedTracker.end_step without pybind11"};
PyMethodDef saved_counts_def = {"counts", saved_counts_fast, METH_NOARGS,
                                "(step_saved_bytes, retained_bytes) without pybind11"};

// Autograd nodes reachable from the roots' grad_fn (each once), up to `limit`: what
// core.loop.count_graph_nodes walks through next_functions in Python, without making a
// Python object per node.
int64_t count_graph_nodes(const py::list& roots, int64_t limit) {
  using torch::autograd::Node;
  std::vector<Node*> stack;
  stack.reserve(256);
  PointerSet seen(256);
  for (const auto& r : roots) {
    if (!THPVariable_Check(r.ptr())) {
      throw py::type_error("count_graph_nodes takes tensors");
    }
    Node* fn = THPVariable_Unpack(r.ptr()).grad_fn().get();
    if (fn != nullptr && seen.insert(fn)) {
      stack.push_back(fn);
    }
  }
  while (!stack.empty() && static_cast<int64_t>(seen.size()) < limit) {
    Node* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      Node* next = edge.function.get();
      if (next != nullptr && seen.insert(next)) {
        stack.push_back(next);
      }
    }
  }
  return std::min(static_cast<int64_t>(seen.size()), limit);
}

PyObject* count_graph_nodes_fast(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  return guarded([&]() -> PyObject* {
    if (nargs != 2 || !PyList_Check(args[0])) {
      PyErr_SetString(PyExc_TypeError, "count_graph_nodes(roots: list, limit: int)");
      return nullptr;
    }
    const int64_t limit = PyLong_AsLongLong(args[1]);
    if (limit == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    return PyLong_FromLongLong(
        count_graph_nodes(py::reinterpret_borrow<py::list>(args[0]), limit));
  });
}

PyMethodDef count_graph_nodes_def = {
    "count_graph_nodes", reinterpret_cast<PyCFunction>(count_graph_nodes_fast), METH_FASTCALL,
    "count_graph_nodes(roots, limit): autograd nodes reachable from the roots, up to limit"};

}  // namespace

PYBIND11_MODULE(memlens_native, m) {
  m.doc() = "memlens native helpers: allocator events, graph node counts";
  // A plain C function: the loop calls it between forward and backward (see bind_fast).
  PyObject* count = PyCFunction_NewEx(&count_graph_nodes_def, nullptr, m.ptr());
  if (count == nullptr) {
    throw py::error_already_set();
  }
  m.add_object("count_graph_nodes", py::reinterpret_steal<py::object>(count));

  py::class_<GradWatch>(m, "GradWatch")
      .def(py::init<const py::list&>())
      .def("uninstall", &GradWatch::uninstall)
      .def("set_param_keys", &GradWatch::set_param_keys)
      .def("grad_storages", &GradWatch::grad_storages)
      .def("fast_functions", [](py::object self) {
        // (install, sum_of_squares) as plain C functions, for the loop's every step.
        return bound_functions<GradWatch>(self, {&watch_install_def, &watch_sum_def});
      });

  py::class_<LightProbe>(m, "LightProbe")
      .def(py::init<py::object, py::object>(), py::arg("watch"), py::arg("saved"))
      .def("fast_sample", [](py::object self) {
        // sample as a plain C function (the loop's samples outside the edges).
        return py::object(bound_functions<LightProbe>(self, {&light_sample_def})[0]);
      })
      .def("set_rules", &LightProbe::set_rules, py::arg("grads"), py::arg("optimizer"),
           py::arg("heap"), py::arg("preset"), py::arg("t0"))
      .def_static("clock", &LightProbe::clock)
      .def("fast_edges", [](py::object self) {
        // (edge, take) as plain C functions: edge runs at every phase edge.
        return bound_functions<LightProbe>(self, {&light_edge_def, &light_take_def});
      });

  SavedHolderType.tp_name = "memlens_native.SavedHolder";
  SavedHolderType.tp_basicsize = sizeof(SavedHolder);
  SavedHolderType.tp_dealloc = saved_holder_dealloc;
  SavedHolderType.tp_flags = Py_TPFLAGS_DEFAULT;
  SavedHolderType.tp_doc = "what memlens' pack hook gives autograd to keep";
  if (PyType_Ready(&SavedHolderType) < 0) {
    throw py::error_already_set();
  }
  py::class_<SavedTracker, std::shared_ptr<SavedTracker>>(m, "SavedTracker")
      .def(py::init<>())
      .def("set_param_ptrs", &SavedTracker::set_param_ptrs)
      .def("contains", &SavedTracker::contains)
      .def("keys", &SavedTracker::keys)
      .def_property_readonly("live_bytes", &SavedTracker::live_bytes)
      .def("fast_functions", [](py::object self) {
        // (new_step, end_step, counts) as plain C functions, for the loop's every step.
        return bound_functions<SavedTracker>(
            self, {&saved_new_step_def, &saved_end_step_def, &saved_counts_def});
      })
      .def("hook_functions", [](std::shared_ptr<SavedTracker> self) {
        // The hooks' `self`: a capsule with its own reference to the tracker, so holders
        // that outlive the Python tracker object (a kept graph) still find it.
        PyObject* capsule = PyCapsule_New(
            new std::shared_ptr<SavedTracker>(std::move(self)), kCapsule, [](PyObject* c) {
              delete static_cast<std::shared_ptr<SavedTracker>*>(
                  PyCapsule_GetPointer(c, kCapsule));
            });
        if (capsule == nullptr) {
          throw py::error_already_set();
        }
        PyObject* pack = PyCFunction_New(&pack_def, capsule);
        PyObject* unpack = PyCFunction_New(&unpack_def, capsule);
        Py_DECREF(capsule);
        if (pack == nullptr || unpack == nullptr) {
          Py_XDECREF(pack);
          Py_XDECREF(unpack);
          throw py::error_already_set();
        }
        return py::make_tuple(py::reinterpret_steal<py::object>(pack),
                              py::reinterpret_steal<py::object>(unpack));
      });
  py::class_<Recorder, std::shared_ptr<Recorder>>(m, "Recorder")
      .def(py::init(&make_recorder), py::arg("t0_us"), py::arg("with_frames"),
           py::arg("internal"))
      .def("start", &Recorder::start)
      .def("stop", &Recorder::stop)
      .def("track", &Recorder::track)
      .def("freed", &Recorder::freed)
      .def("begin_phase", &Recorder::begin_phase)
      .def("reset_peak", &Recorder::reset_peak)
      .def_property_readonly("live_bytes", &Recorder::live_bytes)
      .def_property_readonly("peak_bytes", &Recorder::peak_bytes)
      .def_property_readonly("pending", &Recorder::pending)
      .def("classify", &Recorder::classify)
      .def("drain", &Recorder::drain)
      .def("clear", &Recorder::clear);
}
