/**
 * The in-environment half of the gateway relay: a small HTTP server on 127.0.0.1 (an ephemeral port) that carries
 * every request it gets, and its streamed response, as framed lines over its own stdin/stdout to the worker
 * (host.ts), which forwards them to the model gateway. Two implementations without dependencies, for the runtime
 * the agent brings: Node (the Node agents, or Rollout's Node runtime under /opt/rollout) and Python 3 (the Python
 * agents). Both speak the protocol of frames.ts, and both exit when their stdin ends (the worker is gone).
 *
 * They hold no secret: the agent authenticates with its per-trial token, which the gateway checks on the worker.
 */
import { AGENTS_ROOT } from '../../contracts/paths';
import { shellQuote } from '../../shell';

const NODE_RELAY = `
const http = require("http");
const pending = new Map();
let next = 0;
const send = (frame) => process.stdout.write(JSON.stringify(frame) + "\\n");
const server = http.createServer((req, res) => {
  // Origin-form targets only ("/t/..."): an absolute URL or an authority is never carried to the worker.
  if (!req.url.startsWith("/") || req.url.startsWith("//")) {
    res.writeHead(400, { "content-type": "text/plain", connection: "close" });
    res.end("rollout relay: only origin-form request targets (/t/...) are relayed\\n");
    return;
  }
  const id = ++next;
  pending.set(id, res);
  send({ t: "req", id, method: req.method, path: req.url, headers: req.headers });
  req.on("data", (chunk) => send({ t: "body", id, data: chunk.toString("base64") }));
  req.on("end", () => send({ t: "end", id }));
  res.on("close", () => { if (pending.delete(id)) send({ t: "abort", id }); });
});
server.listen(0, "127.0.0.1", () => send({ t: "ready", port: server.address().port, runtime: "node " + process.version }));
let buffer = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (data) => {
  buffer += data;
  for (let i = buffer.indexOf("\\n"); i >= 0; i = buffer.indexOf("\\n")) {
    const line = buffer.slice(0, i);
    buffer = buffer.slice(i + 1);
    let frame;
    try { frame = JSON.parse(line); } catch { continue; }
    const res = pending.get(frame.id);
    if (!res) continue;
    if (frame.t === "head") res.writeHead(frame.status, frame.headers);
    else if (frame.t === "body") res.write(Buffer.from(frame.data, "base64"));
    else if (frame.t === "end") { pending.delete(frame.id); res.end(); }
    else if (frame.t === "error") {
      pending.delete(frame.id);
      if (res.headersSent) res.destroy();
      else { res.writeHead(502, { "content-type": "text/plain" }); res.end("rollout relay: " + frame.message); }
    }
  }
});
process.stdin.on("end", () => process.exit(0));
`;

// HTTP/1.0 responses (BaseHTTPRequestHandler's default): the body ends with the connection, so a stream of unknown
// length needs no chunked encoding here.
const PYTHON_RELAY = `
import base64, http.server, json, queue, socketserver, sys, threading
lock = threading.Lock()
pending = {}
counter = [0]
def send(frame):
    with lock:
        sys.stdout.write(json.dumps(frame) + "\\n")
        sys.stdout.flush()
def body_of(handler):
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                handler.rfile.readline()
                return
            while size > 0:
                chunk = handler.rfile.read(min(size, 65536))
                if not chunk:
                    return
                size -= len(chunk)
                yield chunk
            handler.rfile.readline()
    else:
        left = int(handler.headers.get("Content-Length") or 0)
        while left > 0:
            chunk = handler.rfile.read(min(left, 65536))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk
class Relay(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def refuse(self, status, message):
        self.close_connection = True
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.end_headers()
        self.wfile.write(("rollout relay: " + message + "\\n").encode())
    def relay(self):
        # Origin-form targets only ("/t/..."): an absolute URL or an authority is never carried to the worker.
        if not self.path.startswith("/") or self.path.startswith("//"):
            return self.refuse(400, "only origin-form request targets (/t/...) are relayed")
        if sum(len(k) + len(v) for k, v in self.headers.items()) > 65536:
            return self.refuse(431, "request headers over 64 KiB")
        with lock:
            counter[0] += 1
            rid = counter[0]
        inbox = queue.Queue()
        pending[rid] = inbox
        headers = {k.lower(): v for k, v in self.headers.items()}
        send({"t": "req", "id": rid, "method": self.command, "path": self.path, "headers": headers})
        for chunk in body_of(self):
            send({"t": "body", "id": rid, "data": base64.b64encode(chunk).decode()})
        send({"t": "end", "id": rid})
        started = False
        try:
            while True:
                frame = inbox.get()
                if frame["t"] == "head":
                    self.send_response(frame["status"])
                    for k, v in frame["headers"].items():
                        for value in (v if isinstance(v, list) else [v]):
                            self.send_header(k, value)
                    self.end_headers()
                    started = True
                elif frame["t"] == "body":
                    self.wfile.write(base64.b64decode(frame["data"]))
                    self.wfile.flush()
                elif frame["t"] == "end":
                    break
                elif frame["t"] == "error":
                    if not started:
                        self.send_response(502)
                        self.end_headers()
                        self.wfile.write(("rollout relay: " + frame["message"]).encode())
                    break
        except OSError:
            send({"t": "abort", "id": rid})
        finally:
            pending.pop(rid, None)
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = relay
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
server = Server(("127.0.0.1", 0), Relay)
send({"t": "ready", "port": server.server_address[1], "runtime": "python " + sys.version.split()[0]})
threading.Thread(target=server.serve_forever, daemon=True).start()
for line in sys.stdin:
    try:
        frame = json.loads(line)
    except ValueError:
        continue
    inbox = pending.get(frame.get("id"))
    if inbox is not None:
        inbox.put(frame)
`;

/** Exit code of the relay's command when the environment has neither runtime. */
export const RELAY_NO_RUNTIME = 127;

/**
 * The shell command that runs the relay: the image's node, else the Node runtime Rollout installs for Node agents,
 * else python3; else it exits with RELAY_NO_RUNTIME and a line saying so on stderr.
 */
export function relayCommand(): string {
  return [
    `for n in "$(command -v node)" ${AGENTS_ROOT}/node-*/bin/node; do`,
    `  if [ -x "$n" ]; then exec "$n" -e ${shellQuote(NODE_RELAY)}; fi`,
    'done',
    `if command -v python3 >/dev/null 2>&1; then exec python3 -u -c ${shellQuote(PYTHON_RELAY)}; fi`,
    'echo "the environment has neither node nor python3 to run the gateway relay" >&2',
    `exit ${RELAY_NO_RUNTIME}`,
  ].join('\n');
}

/** For tests: only the Python relay, as an environment without Node runs it. */
export function pythonRelayCommand(): string {
  return `exec python3 -u -c ${shellQuote(PYTHON_RELAY)}`;
}
