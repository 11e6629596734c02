//! Task lists: the work of one cycle on one mesh-data partition, as tasks with dependencies.
//!
//! A task is a closure that returns [`TaskStatus::Complete`] when its work is done or
//! [`TaskStatus::Incomplete`] when it must be polled again later (a receive whose message
//! has not arrived). A [`TaskRegion`] holds one [`TaskList`] per partition and runs them
//! interleaved, so that one partition's waiting overlaps another's work, until every task is
//! complete. A task that stays incomplete longer than the region's timeout (Parthenon's
//! `parthenon/time/recv_bdry_buf_timeout_sec`) stops the run with an error naming every task
//! still pending: a lost message never becomes a silent hang.

use std::time::{Duration, Instant};

/// What a task reports after one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Its work is done; tasks that depend on it may run.
    Complete,
    /// Not yet (e.g. a message has not arrived): call again later.
    Incomplete,
}

/// The index of a task in its list, as returned by [`TaskList::add`].
pub type TaskId = usize;

/// Why a region stopped.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A dependency names no task of its list.
    #[error("task list {list}: task '{task}' depends on task id {dep}, which does not exist")]
    UnknownDependency {
        list: String,
        task: String,
        dep: TaskId,
    },
    /// The dependencies form a cycle, so these tasks could never run.
    #[error("task list {list}: dependency cycle among tasks {}", .tasks.join(", "))]
    Cycle { list: String, tasks: Vec<String> },
    /// A task stayed incomplete past the timeout.
    #[error(
        "task '{task}' stayed incomplete for more than {} s (parthenon/time/recv_bdry_buf_timeout_sec); tasks still pending: {}",
        .timeout.as_secs_f64(), .pending.join(", ")
    )]
    Timeout {
        task: String,
        timeout: Duration,
        pending: Vec<String>,
    },
    /// A task failed.
    #[error("task '{task}' failed")]
    Failed {
        task: String,
        #[source]
        source: anyhow::Error,
    },
}

type TaskFn<'a> = Box<dyn FnMut() -> anyhow::Result<TaskStatus> + 'a>;
type WaitingOn<'a> = Box<dyn Fn() -> Vec<String> + 'a>;

/// How many of a task's pending items a timeout message lists.
const LISTED: usize = 16;

struct Task<'a> {
    name: String,
    deps: Vec<TaskId>,
    run: TaskFn<'a>,
    /// What the task waits for (e.g. the channels of a receive), named on a timeout.
    waiting_on: Option<WaitingOn<'a>>,
    done: bool,
    /// When the task first answered `Incomplete` in the current execution.
    waiting_since: Option<Instant>,
}

/// The tasks of one partition, in the order they were added.
pub struct TaskList<'a> {
    name: String,
    tasks: Vec<Task<'a>>,
}

impl<'a> TaskList<'a> {
    /// An empty list; `name` prefixes its task names in messages.
    pub fn new(name: impl Into<String>) -> Self {
        TaskList {
            name: name.into(),
            tasks: Vec::new(),
        }
    }

    /// Adds a task that may run once every task in `deps` is complete. Ids are handed out in
    /// order from 0, so a dependency may name a task added later; [`TaskRegion::execute`]
    /// checks that every id exists and that there is no cycle.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        deps: &[TaskId],
        run: impl FnMut() -> anyhow::Result<TaskStatus> + 'a,
    ) -> TaskId {
        self.tasks.push(Task {
            name: name.into(),
            deps: deps.to_vec(),
            run: Box::new(run),
            waiting_on: None,
            done: false,
            waiting_since: None,
        });
        self.tasks.len() - 1
    }

    /// Like [`TaskList::add`], for a task that polls: `waiting_on` names what it still waits
    /// for (the channels of a receive), and a timeout message lists it.
    pub fn add_polled(
        &mut self,
        name: impl Into<String>,
        deps: &[TaskId],
        run: impl FnMut() -> anyhow::Result<TaskStatus> + 'a,
        waiting_on: impl Fn() -> Vec<String> + 'a,
    ) -> TaskId {
        let id = self.add(name, deps, run);
        self.tasks[id].waiting_on = Some(Box::new(waiting_on));
        id
    }

    fn full_name(&self, t: &Task) -> String {
        format!("{}/{}", self.name, t.name)
    }

    /// Rejects unknown dependencies and cycles (Kahn's algorithm: what cannot be ordered lies
    /// on or behind a cycle).
    fn validate(&self) -> Result<(), TaskError> {
        let n = self.tasks.len();
        for t in &self.tasks {
            if let Some(&dep) = t.deps.iter().find(|&&d| d >= n) {
                return Err(TaskError::UnknownDependency {
                    list: self.name.clone(),
                    task: t.name.clone(),
                    dep,
                });
            }
        }
        let mut indegree: Vec<usize> = self.tasks.iter().map(|t| t.deps.len()).collect();
        let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut ordered = 0;
        while let Some(i) = ready.pop() {
            ordered += 1;
            for (j, t) in self.tasks.iter().enumerate() {
                for _ in t.deps.iter().filter(|&&d| d == i) {
                    indegree[j] -= 1;
                    if indegree[j] == 0 {
                        ready.push(j);
                    }
                }
            }
        }
        if ordered == n {
            return Ok(());
        }
        Err(TaskError::Cycle {
            list: self.name.clone(),
            tasks: (0..n)
                .filter(|&i| indegree[i] > 0)
                .map(|i| self.tasks[i].name.clone())
                .collect(),
        })
    }

    fn reset(&mut self) {
        for t in &mut self.tasks {
            t.done = false;
            t.waiting_since = None;
        }
    }

    fn complete(&self) -> bool {
        self.tasks.iter().all(|t| t.done)
    }

    /// Calls every task whose dependencies are complete once, in id order. Returns whether
    /// any task completed, or the task that has waited past `timeout`.
    fn sweep(&mut self, timeout: Duration) -> Result<bool, TaskError> {
        let mut progressed = false;
        for i in 0..self.tasks.len() {
            let ready = {
                let t = &self.tasks[i];
                !t.done && t.deps.iter().all(|&d| self.tasks[d].done)
            };
            if !ready {
                continue;
            }
            let t = &mut self.tasks[i];
            match (t.run)() {
                Ok(TaskStatus::Complete) => {
                    t.done = true;
                    t.waiting_since = None;
                    progressed = true;
                }
                Ok(TaskStatus::Incomplete) => {
                    let since = *t.waiting_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > timeout {
                        let task = self.full_name(&self.tasks[i]);
                        return Err(TaskError::Timeout {
                            task,
                            timeout,
                            pending: Vec::new(),
                        });
                    }
                }
                Err(source) => {
                    return Err(TaskError::Failed {
                        task: format!("{}/{}", self.name, t.name),
                        source,
                    })
                }
            }
        }
        Ok(progressed)
    }

    /// The tasks not yet complete; one that was polling also names what it waits for.
    fn pending(&self) -> impl Iterator<Item = String> + '_ {
        self.tasks.iter().filter(|t| !t.done).map(|t| {
            let name = self.full_name(t);
            let items = match (&t.waiting_on, t.waiting_since) {
                (Some(w), Some(_)) => w(),
                _ => return name,
            };
            let mut listed = items[..items.len().min(LISTED)].join("; ");
            if items.len() > LISTED {
                listed += &format!("; and {} more", items.len() - LISTED);
            }
            format!("{name} [waiting on {listed}]")
        })
    }
}

/// Several task lists (one per partition) run interleaved until all are complete.
pub struct TaskRegion<'a> {
    lists: Vec<TaskList<'a>>,
    timeout: Duration,
}

impl<'a> TaskRegion<'a> {
    /// A region whose tasks may stay incomplete at most `timeout` each.
    pub fn new(timeout: Duration) -> Self {
        TaskRegion {
            lists: Vec::new(),
            timeout,
        }
    }

    /// Adds a partition's list.
    pub fn push(&mut self, list: TaskList<'a>) {
        self.lists.push(list);
    }

    /// Runs every list to completion; may be called again (each call starts every task
    /// afresh, so one region serves every cycle).
    pub fn execute(&mut self) -> Result<(), TaskError> {
        for l in &mut self.lists {
            l.validate()?;
            l.reset();
        }
        loop {
            let mut progressed = false;
            let mut all_done = true;
            for l in &mut self.lists {
                if l.complete() {
                    continue;
                }
                match l.sweep(self.timeout) {
                    Ok(p) => progressed |= p,
                    Err(TaskError::Timeout { task, timeout, .. }) => {
                        return Err(TaskError::Timeout {
                            task,
                            timeout,
                            pending: self.lists.iter().flat_map(TaskList::pending).collect(),
                        })
                    }
                    Err(e) => return Err(e),
                }
                all_done &= l.complete();
            }
            if all_done {
                return Ok(());
            }
            if !progressed {
                // Everything left is waiting on messages: let other processes on this core run.
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    const LONG: Duration = Duration::from_secs(60);

    #[test]
    fn dependencies_order_the_tasks() {
        let log = RefCell::new(Vec::new());
        let mut list = TaskList::new("p0");
        // Added out of order: "c" needs "b", which is added after it.
        let a = list.add("a", &[], || {
            log.borrow_mut().push("a");
            Ok(TaskStatus::Complete)
        });
        let c = list.add("c", &[a, 2], || {
            log.borrow_mut().push("c");
            Ok(TaskStatus::Complete)
        });
        let b = list.add("b", &[a], || {
            log.borrow_mut().push("b");
            Ok(TaskStatus::Complete)
        });
        assert_eq!((a, c, b), (0, 1, 2));
        let mut region = TaskRegion::new(LONG);
        region.push(list);
        region.execute().unwrap();
        assert_eq!(*log.borrow(), ["a", "b", "c"]);
        // A region runs again from the start.
        region.execute().unwrap();
        assert_eq!(log.borrow().len(), 6);
    }

    #[test]
    fn incomplete_tasks_are_polled_and_lists_interleave() {
        let polls = Cell::new(0);
        let log = RefCell::new(Vec::new());
        let mut region = TaskRegion::new(LONG);
        let mut recv = TaskList::new("p0");
        let r = recv.add("recv", &[], || {
            polls.set(polls.get() + 1);
            log.borrow_mut().push("poll");
            Ok(if polls.get() < 3 {
                TaskStatus::Incomplete
            } else {
                TaskStatus::Complete
            })
        });
        recv.add("unpack", &[r], || {
            log.borrow_mut().push("unpack");
            Ok(TaskStatus::Complete)
        });
        let mut other = TaskList::new("p1");
        other.add("work", &[], || {
            log.borrow_mut().push("work");
            Ok(TaskStatus::Complete)
        });
        region.push(recv);
        region.push(other);
        region.execute().unwrap();
        assert_eq!(polls.get(), 3);
        // p1's work ran while p0 was still waiting for its message.
        assert_eq!(*log.borrow(), ["poll", "work", "poll", "poll", "unpack"]);
    }

    #[test]
    fn a_stuck_receive_times_out_naming_the_pending_tasks() {
        let mut region = TaskRegion::new(Duration::from_millis(20));
        let mut l0 = TaskList::new("p0");
        let r = l0.add("recv_bdry", &[], || Ok(TaskStatus::Incomplete));
        l0.add("set_bounds", &[r], || Ok(TaskStatus::Complete));
        let mut l1 = TaskList::new("p1");
        l1.add("send_bdry", &[], || Ok(TaskStatus::Complete));
        region.push(l0);
        region.push(l1);
        let t0 = Instant::now();
        let e = region.execute().unwrap_err();
        assert!(t0.elapsed() >= Duration::from_millis(20));
        match &e {
            TaskError::Timeout { task, pending, .. } => {
                assert_eq!(task, "p0/recv_bdry");
                assert_eq!(pending, &["p0/recv_bdry", "p0/set_bounds"]);
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        assert!(
            msg.contains("tasks still pending: p0/recv_bdry, p0/set_bounds"),
            "{msg}"
        );
    }

    #[test]
    fn a_timeout_names_what_a_polled_task_waits_on() {
        let missing: Vec<String> = (0..20).map(|i| format!("ch{i}")).collect();
        let mut region = TaskRegion::new(Duration::from_millis(10));
        let mut list = TaskList::new("p0");
        list.add_polled(
            "recv",
            &[],
            || Ok(TaskStatus::Incomplete),
            || missing.clone(),
        );
        region.push(list);
        let msg = region.execute().unwrap_err().to_string();
        assert!(
            msg.contains("p0/recv [waiting on ch0; ch1;") && msg.contains("ch15; and 4 more]"),
            "{msg}"
        );
        assert!(!msg.contains("ch16"), "{msg}");
    }

    #[test]
    fn cycles_and_unknown_dependencies_are_errors() {
        let mut list = TaskList::new("p0");
        list.add("a", &[], || Ok(TaskStatus::Complete));
        list.add("b", &[3], || Ok(TaskStatus::Complete));
        list.add("c", &[1], || Ok(TaskStatus::Complete));
        list.add("d", &[2], || Ok(TaskStatus::Complete));
        let mut region = TaskRegion::new(LONG);
        region.push(list);
        let e = region.execute().unwrap_err();
        assert!(
            matches!(&e, TaskError::Cycle { tasks, .. } if tasks == &["b", "c", "d"]),
            "{e:?}"
        );
        assert!(e
            .to_string()
            .contains("dependency cycle among tasks b, c, d"));

        let mut list = TaskList::new("p0");
        list.add("a", &[7], || Ok(TaskStatus::Complete));
        let mut region = TaskRegion::new(LONG);
        region.push(list);
        let e = region.execute().unwrap_err().to_string();
        assert!(e.contains("task 'a' depends on task id 7"), "{e}");
    }

    #[test]
    fn a_failing_task_stops_the_region() {
        let ran = Cell::new(false);
        let mut list = TaskList::new("p0");
        let a = list.add("a", &[], || Err(anyhow::anyhow!("disk full")));
        list.add("b", &[a], || {
            ran.set(true);
            Ok(TaskStatus::Complete)
        });
        let mut region = TaskRegion::new(LONG);
        region.push(list);
        let e = region.execute().unwrap_err();
        assert_eq!(
            format!("{:#}", anyhow::Error::new(e)),
            "task 'p0/a' failed: disk full"
        );
        assert!(!ran.get());
    }
}
