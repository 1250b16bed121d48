// /demo/checkout: the sandbox PSP's confirm step, standing in for a
// provider's hosted checkout. What to confirm arrives in the URL fragment
// (never sent to a server); only the sandbox's confirm endpoint is called.
import { request } from '/js/presenced.js';
import { $, explain, money, text } from './common.js';

const f = new URLSearchParams(location.hash.slice(1));
const confirmPath = f.get('confirm') || '';
const back = f.get('back') || '/';
// Only the sandbox's own endpoint, and only back into the demo pages.
const valid = /^\/v1\/sandbox\/psp\/intents\/[A-Za-z0-9_]+\/confirm$/.test(confirmPath) && /^\/demo\/[A-Za-z0-9._/-]+$/.test(back);

if (valid) {
  text('amount', money(Number(f.get('amount')), f.get('currency') || 'EUR'));
} else {
  text('checkout-state', 'Nothing to pay: open this page from a hold’s Pay button.');
  $('confirm').disabled = true;
}

$('pay-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('confirm').disabled = true;
  text('checkout-state', 'Paying…');
  try {
    const fault = $('fault').value;
    const intent = await request(location.origin, confirmPath, {
      method: 'POST',
      body: { clientSecret: f.get('secret'), ...(fault ? { faults: [fault] } : {}) },
    });
    text('checkout-state', `Payment ${intent.status}. Back to the shop…`);
    history.replaceState(null, '', location.pathname); // forget the secret
    location.replace(back + '#paid');
  } catch (err) {
    text('checkout-state', explain(err));
    $('confirm').disabled = false;
  }
});
