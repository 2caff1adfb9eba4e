"""memlens.core: the Qt-free engine (docs/architecture.md has the data flow, the threads and
which file holds each idea). The lab's loop (loop, training) and the watch of a user's script
(watch/) are two drivers of one recorder (recorder/); a run goes to a run folder (runfolder/)."""
