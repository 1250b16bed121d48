// /demo/presence: sign in, follow contacts, see their dots change.
import { Presence, request } from '/js/presenced.js';
import { $, afterPaint, config, explain, randomName, show, stateWords, text, userToken } from './common.js';

const manual = config.manualStatuses ?? [];
let presence = null;
let me = '';

const select = $('my-status');
for (const s of manual) select.append(new Option(s, s));

if (!config.signIn) {
  show('user-field', false);
  show('token-field', true);
  text('signin-help', 'This server checks tokens of a real identity provider: paste one of yours.');
} else {
  $('user').value = sessionStorage.getItem('pd-presence-user') || randomName('user');
  text('signin-help', 'A development server: any user id signs in (open another browser as a contact to see dots change).');
}

/** The dot's class and words for a status. */
function look(status) {
  if (!status || status === 'offline') return ['offline', 'offline'];
  if (status === 'online' || status === 'idle') return [status, status];
  if (status === 'away') return ['away', 'away'];
  return ['busy', status];
}

function contactsKey() {
  return 'pd-contacts:' + me;
}

function savedContacts() {
  try {
    return JSON.parse(localStorage.getItem(contactsKey()) || '[]');
  } catch {
    return [];
  }
}

function saveContacts() {
  localStorage.setItem(contactsKey(), JSON.stringify(presence.following));
}

function row(user) {
  let li = document.querySelector(`li[data-user="${CSS.escape(user)}"]`);
  if (li) return li;
  li = document.createElement('li');
  li.dataset.user = user;
  li.dataset.status = 'unknown';
  const dot = document.createElement('span');
  dot.className = 'dot unknown';
  dot.setAttribute('aria-hidden', 'true');
  const name = document.createElement('span');
  name.className = 'name';
  name.textContent = user;
  const word = document.createElement('span');
  word.className = 'word';
  word.textContent = 'unknown';
  const actions = document.createElement('span');
  actions.className = 'actions';
  const notify = document.createElement('button');
  notify.type = 'button';
  notify.className = 'secondary notify';
  notify.textContent = 'Notify me when online';
  notify.setAttribute('aria-label', `Notify me when ${user} is online`);
  notify.addEventListener('click', () => {
    presence.notifyWhenOnline(user);
    notify.disabled = true;
    notify.textContent = 'Will notify';
  });
  const remove = document.createElement('button');
  remove.type = 'button';
  remove.className = 'secondary';
  remove.textContent = 'Remove';
  remove.setAttribute('aria-label', `Remove ${user}`);
  remove.addEventListener('click', () => {
    presence.unfollow(user);
    saveContacts();
    li.remove();
  });
  actions.append(notify, remove);
  li.append(dot, name, word, actions);
  $('contacts').append(li);
  return li;
}

function paint(s) {
  const li = row(s.user);
  const [cls, words] = look(s.status);
  li.dataset.status = s.status;
  li.querySelector('.dot').className = 'dot ' + cls;
  li.querySelector('.word').textContent = words;
  const notify = li.querySelector('.notify');
  if (s.status !== 'offline' && notify.textContent === 'Will notify') {
    notify.disabled = false;
    notify.textContent = 'Notify me when online';
  }
}

function note(message) {
  show('notes-card', true);
  const li = document.createElement('li');
  li.textContent = `${new Date().toLocaleTimeString()}: ${message}`;
  $('notes').prepend(li);
}

async function signIn(ev) {
  ev?.preventDefault();
  $('signin-button').disabled = true;
  try {
    const user = $('user').value.trim();
    const token = await userToken(user, $('token').value);
    me = config.signIn ? user : JSON.parse(atob(token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/'))).sub;
    sessionStorage.setItem('pd-presence-user', me);
    start(token);
  } catch (err) {
    text('signin-help', explain(err));
    $('signin-button').disabled = false;
  }
}

function start(token) {
  text('me-name', me);
  show('signin', false);
  show('me', true);
  show('contacts-card', true);
  presence = new Presence({ token });
  presence.on('state', (s) => {
    text('conn-state', stateWords(s));
    document.body.dataset.presence = s;
    if (s === 'unauthorized') {
      // The token expired or was refused: sign in again.
      show('signin', true);
      $('signin-button').disabled = false;
      text('signin-help', 'Your sign-in ended: sign in again.');
    }
  });
  presence.on('status', paint);
  presence.on('self', (s) => {
    select.value = manual.includes(s.status) ? s.status : '';
    $('invisible').checked = !!s.invisible;
  });
  presence.on('privacy', (v) => {
    $('see-status').value = v.status;
    $('see-last').value = v.lastActiveAt;
  });
  presence.connection.on('open', () => {
    readSelf(token);
    presence.setPrivacy({}); // changes nothing: reads the settings back
  });
  presence.on('notification', (n) => note(`${n.user} is online now`));
  presence.on('error', (e) => note(explain(e)));
  const contacts = savedContacts();
  contacts.forEach(row);
  presence.setFollowing(contacts);
  presence.connect();
}

$('signin-form').addEventListener('submit', signIn);
$('add-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const user = $('contact').value.trim();
  if (!user || user === me) return;
  row(user);
  presence.follow(user);
  saveContacts();
  $('contact').value = '';
  $('contact').focus();
});
select.addEventListener('change', () => presence.setStatus(select.value || null));
$('invisible').addEventListener('change', () => presence.setInvisible($('invisible').checked));
for (const id of ['see-status', 'see-last']) {
  $(id).addEventListener('change', () => {
    const choice = {};
    if ($('see-status').value) choice.status = $('see-status').value;
    if ($('see-last').value) choice.lastActiveAt = $('see-last').value;
    presence.setPrivacy(choice);
  });
}

/** Whether we appear offline (set on another device, or before). */
async function readSelf(token) {
  try {
    const s = await request(location.origin, '/v1/presence/users/' + encodeURIComponent(me), { token });
    $('invisible').checked = !!s.invisible;
  } catch {
    // The socket's replies keep it right from the next change.
  }
}
$('signout').addEventListener('click', () => {
  presence.logout();
  sessionStorage.removeItem('pd-presence-user');
  location.reload();
});

afterPaint(() => {
  if (config.signIn && sessionStorage.getItem('pd-presence-user')) signIn();
});
