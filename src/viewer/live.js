// Follows a running run on its page: each new visit is added to the visits table, and its
// outcome filled in when it ends, from the server's event stream. Text is set with
// textContent only: nothing from the stream is ever parsed as HTML.
(function () {
  "use strict";
  var table = document.getElementById("visits");
  if (!table || !window.EventSource) { return; }
  var body = table.tBodies[0];
  var columns = table.tHead.rows[0].cells.length;
  var source = new EventSource(table.dataset.events + "?from=" + table.dataset.offset);
  function rowOf(step, visit) {
    var name = step + " #" + visit;
    for (var i = body.rows.length - 1; i >= 0; i--) {
      if (body.rows[i].cells[0].textContent === name) { return body.rows[i]; }
    }
    return null;
  }
  // What the run is now, told under the summary (which is as loaded).
  var states = {
    step_started: "running", gate_requested: "waiting at a gate", run_completed: "completed",
    run_failed: "failed", run_abandoned: "abandoned", run_interrupted: "stopped"
  };
  function moved(type) {
    if (!states[type]) { return; }
    var note = document.getElementById("moved");
    if (note) {
      note.textContent = "Since this page was loaded, the run is " + states[type] + ".";
      note.hidden = false;
    }
    var waiting = document.getElementById("waiting");
    if (waiting) { waiting.hidden = type !== "gate_requested"; }
  }
  source.addEventListener("run", function (message) {
    var event = JSON.parse(message.data);
    if (event.event_type === "step_started" && !rowOf(event.step_id, event.visit)) {
      var row = body.insertRow(-1);
      for (var c = 0; c < columns; c++) { row.insertCell(-1); }
      var link = document.createElement("a");
      link.href = table.dataset.visitBase + encodeURIComponent(event.step_id) + "/" + event.visit;
      link.textContent = event.step_id + " #" + event.visit;
      row.cells[0].appendChild(link);
      row.cells[1].textContent = event.opcode || "";
      row.cells[2].textContent = "running";
    } else if (event.outcome && event.step_id) {
      var found = rowOf(event.step_id, event.visit);
      if (found) { found.cells[2].textContent = event.outcome; }
    }
    moved(event.event_type);
    if (event.ended) { source.close(); }
  });
})();
