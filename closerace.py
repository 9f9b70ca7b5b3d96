import threading, time, sys, random
from ctxlock import LockManager, BackendError, LockTimeout
url = sys.argv[1]
errs = {}
for it in range(200):
    m = LockManager(url)
    other = LockManager(url)
    names = ["n%d" % (i % 3) for i in range(8)]
    held = []; lost_tokens = []
    lk = threading.Lock()
    def w(n):
        try:
            for _ in range(20):
                v = m.sharable_lock(n).exclusive if random.random()<0.5 else m.sharable_lock(n).shared
                u = v.acquire(deadline=2)
                with lk: held.append(u)
                time.sleep(0.0005)
                if random.random()<0.5: u()
        except BackendError as e:
            errs["BackendError"] = errs.get("BackendError",0)+1
        except BaseException as e:
            errs[type(e).__name__] = errs.get(type(e).__name__,0)+1; print("unexpected", repr(e))
    ts = [threading.Thread(target=w, args=(n,)) for n in names]
    for t in ts: t.start()
    time.sleep(random.random()*0.01)
    m.close()
    for t in ts: t.join(10)
    if any(t.is_alive() for t in ts): print("HANG: thread still alive after close", it); break
    # every unreleased hold must have lost cancelled
    for u in held:
        if not u.released and not u.lost.cancelled:
            print("BUG: hold neither released nor lost", it, u.fence)
    # other manager must get every name now
    for n in set(names):
        try: x = other.lock(n).acquire(deadline=2); x()
        except Exception as e: print("BUG: other cannot get", n, type(e).__name__, e, [ (i.name,i.state,i.owner) for i in other.query()]); 
    q = other.query()
    if q: print("BUG: query after close shows", q)
    other.close()
print("done", errs)
